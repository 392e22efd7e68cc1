#!/usr/bin/env python3
"""Checks that Baton's documentation is what a reader gets.

    python3 .ci/docs.py pages [PAGE.md ...]   paste, build and run every page's Swift
    python3 .ci/docs.py articles [--check]    write (or check) the DocC articles made from Docs/
    python3 .ci/docs.py docc                  build the DocC catalog with the toolchain's docc

`pages` does what a reader does: it pastes a page's ```swift blocks, in order, into the main.swift
of an executable that depends on this checkout by path, builds it with warnings as errors, runs it
(at most a minute) and compares what it prints with the page's ```output blocks, joined in order.
Every page is one executable target of one scratch package, so Baton is compiled once for all pages;
each target is its own module, so nothing one page defines is visible to another. A page without
```swift blocks is skipped; a page with Swift but no ```output block must print nothing.
"""

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "Docs")
CATALOG = os.path.join(ROOT, "Sources", "Baton", "Baton.docc")
ARTICLES = os.path.join(CATALOG, "Articles")
FENCE = re.compile(r"^```(\S*)\s*$")


def fail(message):
    print(f"docs.py: {message}", file=sys.stderr)
    sys.exit(1)


def blocks(text, language, where="a page"):
    """The contents of the fenced blocks whose info string is exactly `language`, in order.

    A fence that a Markdown renderer would show as Swift but this check would not read as ```swift
    (another case, a space, attributes, `~~~`, an indented fence) is an error, not a skipped block.
    """
    found, current, inside = [], None, False
    for number, line in enumerate(text.split("\n"), 1):
        loose = re.match(r"^\s*(```|~~~)\s*(\S*)(.*)$", line)
        if not inside and loose and loose.group(2).lower() in ("swift", "output") and (
            line != "```" + loose.group(2) or loose.group(2) not in ("swift", "output")
        ):
            fail(f"{where}, line {number}: write the fence as ```swift or ```output exactly, at the start of "
                 f"the line and with nothing after it: {line.strip()!r}")
        match = FENCE.match(line)
        if not inside and match:
            inside = True
            current = [] if match.group(1) == language else None
        elif inside and line.strip() == "```":
            inside = False
            if current is not None:
                found.append("\n".join(current))
        elif inside and current is not None:
            current.append(line)
    if inside:
        fail(f"a fenced block is not closed (looking for ```{language})")
    return found


def pages():
    return ["README.md"] + sorted(
        os.path.join("Docs", name) for name in os.listdir(DOCS) if name.endswith(".md")
    )


def target_name(page):
    return "Page" + re.sub(r"[^A-Za-z0-9]", "", os.path.splitext(os.path.basename(page))[0])


def check_install_manifest():
    """The README's consumer Package.swift is a valid manifest whose dependency is this package."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as file:
        manifests = [block for block in blocks(file.read(), "text") if "swift-tools-version" in block]
    if len(manifests) != 1:
        fail("README.md should show one consumer Package.swift (a ```text block)")
    scratch = tempfile.mkdtemp(prefix="baton-manifest-")
    os.makedirs(os.path.join(scratch, "Sources", "App"))
    open(os.path.join(scratch, "Sources", "App", "main.swift"), "w").close()
    with open(os.path.join(scratch, "Package.swift"), "w", encoding="utf-8") as file:
        file.write(manifests[0] + "\n")
    dump = subprocess.run(["swift", "package", "dump-package", "--package-path", scratch],
                          capture_output=True, text=True)
    shutil.rmtree(scratch, ignore_errors=True)
    if dump.returncode != 0:
        print(dump.stderr)
        fail("the README's Package.swift does not parse")
    package = json.loads(dump.stdout)
    identities = [entry["identity"] for dependency in package["dependencies"]
                  for entry in dependency.get("sourceControl", [])]
    products = [item["product"][:2] for target in package["targets"] for item in target["dependencies"]
                if "product" in item]
    requirement = json.dumps(package["dependencies"])
    version = released_version()
    if identities != ["baton"] or products != [["Baton", "baton"]] or f'"{version}"' not in requirement:
        fail(f"the README's Package.swift should depend on Baton from {version}: {identities} {products}")
    print(f"ok   README.md: the consumer Package.swift parses and depends on product Baton of package baton, from {version}")


def start_servers(page):
    """Starts the servers a page tells its reader to start: each line of its ```sh blocks that runs
    `python3 -m http.server ... PORT`, run as written from the repository's root. Returns them once
    each accepts connections on its port."""
    import shlex
    import socket
    import time

    with open(os.path.join(ROOT, page), encoding="utf-8") as file:
        # A trailing `&` (started in the background, as a reader would in one terminal) is dropped.
        commands = [line.strip().rstrip("&").strip() for block in blocks(file.read(), "sh", page)
                    for line in block.split("\n") if line.strip().startswith("python3 -m http.server ")]
    servers = []
    for command in commands:
        port = int(shlex.split(command)[-1])
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                fail(f"{page}: port {port}, which the page's server needs, is already taken")
        servers.append(subprocess.Popen(shlex.split(command), cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or servers[-1].poll() is not None:
                fail(f"{page}: the server `{command}` did not start")
            time.sleep(0.05)
    return servers


def check_pages(selected):
    if not selected:
        check_install_manifest()
    programs = {}
    for page in selected or pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as file:
            text = file.read()
        swift = blocks(text, "swift", page)
        if not swift:
            print(f"-- {page}: no Swift blocks, nothing to run")
            continue
        output = blocks(text, "output")
        programs[page] = ("\n\n".join(swift) + "\n", "".join(block + "\n" for block in output))
    if not programs:
        return

    identity = os.path.basename(ROOT).lower()
    scratch = os.environ.get("BATON_DOCS_SCRATCH") or tempfile.mkdtemp(prefix="baton-pages-")
    sources = os.path.join(scratch, "Sources")
    shutil.rmtree(sources, ignore_errors=True)
    targets = []
    for page, (program, _) in programs.items():
        name = target_name(page)
        os.makedirs(os.path.join(sources, name))
        with open(os.path.join(sources, name, "main.swift"), "w", encoding="utf-8") as file:
            file.write(program)
        products = ["Baton"] + (["BatonNetwork"] if "import BatonNetwork" in program else [])
        dependencies = ", ".join(f'.product(name: "{product}", package: "{identity}")' for product in products)
        targets.append(f'        .executableTarget(name: "{name}", dependencies: [{dependencies}]),')
    with open(os.path.join(scratch, "Package.swift"), "w", encoding="utf-8") as file:
        file.write(
            "// swift-tools-version:6.1\n"
            "import PackageDescription\n\n"
            "let package = Package(\n"
            '    name: "Pages",\n'
            "    platforms: [.macOS(.v13), .iOS(.v16)],\n"
            f"    dependencies: [.package(path: {json.dumps(ROOT)})],\n"
            "    targets: [\n" + "\n".join(targets) + "\n    ]\n)\n"
        )

    build = subprocess.run(
        ["swift", "build", "--package-path", scratch, "-Xswiftc", "-warnings-as-errors"],
        capture_output=True, text=True,
    )
    if build.returncode != 0:
        print(build.stdout[-20000:], build.stderr[-5000:], sep="\n")
        fail("the pages' programs do not build (see above; each page is Sources/PageNAME/main.swift)")
    binaries = subprocess.run(
        ["swift", "build", "--package-path", scratch, "--show-bin-path"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()

    failures = 0
    for page, (_, expected) in programs.items():
        servers = start_servers(page)
        try:
            run = subprocess.run(
                [os.path.join(binaries, target_name(page))], capture_output=True, text=True, timeout=60
            )
        except subprocess.TimeoutExpired:
            print(f"FAIL {page}: still running after a minute")
            failures += 1
            continue
        finally:
            for server in servers:
                server.terminate()
                server.wait()
        if run.returncode != 0:
            print(f"FAIL {page}: exit status {run.returncode}\n{run.stdout}{run.stderr}")
            failures += 1
        elif run.stderr:
            print(f"FAIL {page}: wrote to standard error (a reader would see it):\n{run.stderr}")
            failures += 1
        elif run.stdout != expected:
            print(f"FAIL {page}: prints something else than its ```output blocks")
            sys.stdout.writelines(difflib.unified_diff(
                expected.splitlines(True), run.stdout.splitlines(True), "the page says", "the program printed"
            ))
            failures += 1
        else:
            lines = len(expected.splitlines())
            print(f"ok   {page}: built, ran, printed the {lines} lines it shows")
    if failures:
        fail(f"{failures} page(s) failed")
    if not os.environ.get("BATON_DOCS_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)


# ---- DocC articles -------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([A-Za-z]+)\.md(#[A-Za-z0-9-]+)?\)")
IN_PAGE_LINK = re.compile(r"\]\((#[A-Za-z0-9-]+)\)")
IMAGE_LINK = re.compile(r"\]\(Images/([A-Za-z0-9._-]+)\)")
README_LINK = re.compile(r"\]\(\.\./README\.md(#[A-Za-z0-9-]+)?\)")
FOOTER = "\n<!-- Generated from Docs/{name} by `python3 .ci/docs.py articles`: edit Docs/{name} instead. -->\n"


def slug(heading):
    """GitHub's anchor for a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).strip().replace(" ", "-")


def docc_anchor(heading):
    """DocC's anchor for a heading: its words as written, joined by hyphens, punctuation dropped."""
    return "-".join(re.sub(r"[^A-Za-z0-9 _-]", "", heading).split())


def headings(name):
    with open(os.path.join(DOCS, name + ".md"), encoding="utf-8") as file:
        return {slug(line.lstrip("#").strip()): line.lstrip("#").strip()
                for line in file if line.startswith("#")}


def article(name, text):
    """Docs/NAME.md as a DocC article: links between guides become `doc:` links."""

    def relink(match):
        target, anchor = match.group(1), match.group(2)
        if not os.path.exists(os.path.join(DOCS, target + ".md")):
            fail(f"Docs/{name}: a link to {target}.md, which is not in Docs/")
        if anchor:
            heading = headings(target).get(anchor[1:])
            if heading is None:
                fail(f"Docs/{name}: a link to {target}.md{anchor}, which has no such heading")
            return f"](doc:{target}#{docc_anchor(heading)})"
        return f"](doc:{target})"

    def relink_in_page(match):
        heading = headings(name).get(match.group(1)[1:])
        if heading is None:
            fail(f"Docs/{name}: a link to {match.group(1)}, which is not a heading of the page")
        return f"](doc:{name}#{docc_anchor(heading)})"

    text = IN_PAGE_LINK.sub(relink_in_page, text)

    # Pictures live in Docs/Images; the catalog has copies in its Resources, named alike.
    def reimage(match):
        if not os.path.exists(os.path.join(DOCS, "Images", match.group(1))):
            fail(f"Docs/{name}: a picture Images/{match.group(1)}, which is not in Docs/Images")
        return f"]({match.group(1)})"

    text = IMAGE_LINK.sub(reimage, text)

    # The README is not an article: its first screen and install text are the landing page's.
    text = README_LINK.sub("](doc:Baton)", text)
    if "](../" in text:
        fail(f"Docs/{name}: a link out of Docs/ other than to the README, which DocC cannot follow")
    return LINK.sub(relink, text) + FOOTER.format(name=name + ".md")


def released_version():
    """The one place the version is written: the newest released section of CHANGELOG.md."""
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as file:
        found = re.search(r"^## \[(\d+\.\d+\.\d+)\]", file.read(), re.M)
    if not found:
        fail("CHANGELOG.md has no released version (a `## [X.Y.Z] - date` heading)")
    return found.group(1)


# Where the README and the landing page name the version: written from CHANGELOG.md by `articles`.
VERSION_MENTIONS = [re.compile(r"(Baton )\d+\.\d+\.\d+( supports)"), re.compile(r'(from: ")\d+\.\d+\.\d+(")')]


def sync_version(check):
    """Writes (or checks) the released version into the README and the landing page."""
    version = released_version()
    for path in (os.path.join(ROOT, "README.md"), os.path.join(CATALOG, "Baton.md")):
        with open(path, encoding="utf-8") as file:
            text = file.read()
        wanted = text
        for mention in VERSION_MENTIONS:
            if not mention.search(wanted):
                fail(f"{os.path.relpath(path, ROOT)} does not name the version ({mention.pattern})")
            wanted = mention.sub(lambda match: match.group(1) + version + match.group(2), wanted)
        if wanted == text:
            continue
        if check:
            fail(f"{os.path.relpath(path, ROOT)} names another version than CHANGELOG.md's {version}"
                 " (run `python3 .ci/docs.py articles`)")
        with open(path, "w", encoding="utf-8") as file:
            file.write(wanted)
    print(f"ok   README.md and the landing page name version {version}, CHANGELOG.md's newest release")


def articles(check):
    sync_version(check)
    wanted = {}
    for file_name in sorted(os.listdir(DOCS)):
        if file_name.endswith(".md"):
            with open(os.path.join(DOCS, file_name), encoding="utf-8") as file:
                wanted[file_name] = article(file_name[:-3], file.read())
    images_dir = os.path.join(DOCS, "Images")
    images = sorted(os.listdir(images_dir)) if os.path.isdir(images_dir) else []
    resources = os.path.join(CATALOG, "Resources")
    present_images = set(os.listdir(resources)) if os.path.isdir(resources) else set()
    stale_images = [image for image in sorted(present_images | set(images)) if image not in images
                    or not os.path.exists(os.path.join(resources, image))
                    or open(os.path.join(resources, image), "rb").read()
                    != open(os.path.join(images_dir, image), "rb").read()]
    present = set(os.listdir(ARTICLES)) if os.path.isdir(ARTICLES) else set()
    stale = [name for name in sorted(present | set(wanted)) if name not in wanted
             or not os.path.exists(os.path.join(ARTICLES, name))
             or open(os.path.join(ARTICLES, name), encoding="utf-8").read() != wanted[name]]
    if check:
        if stale_images:
            fail("the catalog's Resources are not the pictures in Docs/Images: " + ", ".join(stale_images)
                 + " (run `python3 .ci/docs.py articles`)")
        if stale:
            fail("the DocC articles are not those made from Docs/: " + ", ".join(stale)
                 + " (run `python3 .ci/docs.py articles`)")
        print(f"ok   {len(wanted)} DocC articles match Docs/")
        return
    if images:
        os.makedirs(resources, exist_ok=True)
    for image in present_images - set(images):
        os.remove(os.path.join(resources, image))
    for image in images:
        shutil.copyfile(os.path.join(images_dir, image), os.path.join(resources, image))
    os.makedirs(ARTICLES, exist_ok=True)
    for name in present - set(wanted):
        os.remove(os.path.join(ARTICLES, name))
    for name, text in wanted.items():
        with open(os.path.join(ARTICLES, name), "w", encoding="utf-8") as file:
            file.write(text)
    print(f"wrote {len(wanted)} articles in {os.path.relpath(ARTICLES, ROOT)}")


# ---- DocC build ----------------------------------------------------------------------------------

def docc():
    articles(check=True)
    scratch = tempfile.mkdtemp(prefix="baton-docc-")
    graphs = os.path.join(scratch, "symbol-graphs")
    os.makedirs(graphs)
    subprocess.run(
        ["swift", "build", "--package-path", ROOT, "--target", "Baton", "--scratch-path",
         os.path.join(ROOT, ".build-docc"),
         "-Xswiftc", "-emit-symbol-graph", "-Xswiftc", "-emit-symbol-graph-dir", "-Xswiftc", graphs,
         "-Xswiftc", "-emit-extension-block-symbols"],
        check=True,
    )

    # Every public type (and every extended Foundation type) is curated on the landing page.
    with open(os.path.join(CATALOG, "Baton.md"), encoding="utf-8") as file:
        landing = file.read()
    # Top-level functions are curated by their full names, `name(label:_:)`.
    curated = set(re.findall(r"^- ``([A-Za-z/_:()]+)``", landing, re.M))
    types = set()
    for file_name in os.listdir(graphs):
        with open(os.path.join(graphs, file_name), encoding="utf-8") as file:
            for symbol in json.load(file)["symbols"]:
                path = symbol["pathComponents"]
                if symbol["kind"]["identifier"] == "swift.extension":
                    types.add("Foundation/" + path[-1])
                elif len(path) == 1:
                    types.add(path[0])
    missing = sorted(types - curated)
    if missing:
        fail("public types missing from the landing page's topics: " + ", ".join(missing))
    print(f"ok   the landing page curates all {len(types)} public types")

    # The landing page shows the README's first-screen example: its blocks before the first section.
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as file:
        readme = file.read()
    first_screen = readme.split("\n## ", 1)[0]
    for language in ("swift", "output"):
        shown = blocks(first_screen, language)
        if not shown or shown != blocks(landing, language)[:len(shown)]:
            fail(f"the landing page's ```{language} blocks are not the README's first-screen example")
    manifests = [[block for block in blocks(text, "text") if "swift-tools-version" in block]
                 for text in (readme, landing)]
    if not manifests[0] or manifests[0] != manifests[1]:
        fail("the landing page's Package.swift is not the README's")

    result = subprocess.run(
        ["docc", "convert", CATALOG, "--additional-symbol-graph-dir", graphs,
         "--fallback-display-name", "Baton", "--fallback-bundle-identifier", "org.baton.Baton",
         "--output-path", os.path.join(scratch, "Baton.doccarchive"), "--warnings-as-errors"],
        capture_output=True, text=True,
    )
    diagnostics = [line for line in (result.stdout + result.stderr).splitlines()
                   if line.startswith(("warning:", "error:"))]
    if result.returncode != 0 or diagnostics:
        print(result.stdout[-20000:], result.stderr[-20000:], sep="\n")
        fail(f"docc reported {len(diagnostics)} warnings or errors")
    pages_built = sum(len(files) for _, _, files in os.walk(
        os.path.join(scratch, "Baton.doccarchive", "data", "documentation")))
    print(f"ok   docc built the catalog ({pages_built} pages) with no warnings")
    shutil.rmtree(scratch, ignore_errors=True)


def main(arguments):
    if not arguments:
        fail("usage: docs.py pages [PAGE ...] | articles [--check] | docc")
    command, rest = arguments[0], arguments[1:]
    if command == "pages":
        check_pages(rest)
    elif command == "articles":
        articles(check="--check" in rest)
    elif command == "docc":
        docc()
    else:
        fail(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
