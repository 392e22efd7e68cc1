#!/usr/bin/env bash
# Installs Baton's Xcode file templates.
#
#   Templates/install.sh                      # into ~/Library/Developer/Xcode/Templates/File Templates/Baton
#   Templates/install.sh --destination DIR    # anywhere else (used by the tests)
#
# Existing Baton templates at the destination are replaced; nothing else there is touched.
set -euo pipefail
source_dir="$(cd "$(dirname "$0")" && pwd)"
destination=""
usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --destination=*)
            destination="${1#--destination=}"
            [ -n "$destination" ] || { echo "install.sh: --destination needs a folder" >&2; usage >&2; exit 2; }
            shift
            ;;
        --destination)
            if [ $# -lt 2 ] || [ -z "$2" ] || [ "${2#-}" != "$2" ]; then
                echo "install.sh: --destination needs a folder" >&2
                usage >&2
                exit 2
            fi
            destination="$2"
            shift 2
            ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
if [ -z "$destination" ]; then
    [ -n "${HOME:-}" ] || { echo "install.sh: HOME is not set; pass --destination DIR" >&2; exit 2; }
    destination="$HOME/Library/Developer/Xcode/Templates/File Templates/Baton"
fi
mkdir -p "$destination"
count=0
for template in "$source_dir"/*.xctemplate; do
    name="$(basename "$template")"
    rm -rf "${destination:?}/$name"
    cp -R "$template" "$destination/$name"
    count=$((count + 1))
done
echo "Installed $count Baton templates in $destination"
echo "In Xcode: File > New > File…, then the Baton section."
