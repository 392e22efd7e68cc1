#!/usr/bin/env python3
"""Writes the static cookbook API that baton-cookbook crawls (DRBOperationTree's example API):

    /cookbook/1         {"id": 1, "title": ..., "recipes": [recipe ids]}
    /recipes/ID         {"id", "name", "ingredients": [ingredient ids], "images": [image ids]}
    /ingredients/ID     {"id", "name", "images": [image ids]}
    /images/ID          a small PNG

Deterministic: running it again writes the same files. Serve the folder with
`python3 -m http.server --directory Sources/baton-cookbook/API 8000`.
"""

import json
import os
import random
import struct
import zlib

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "API")
RECIPES, INGREDIENTS = 300, 120
DISHES = ["stew", "soup", "bread", "pie", "salad", "curry", "risotto", "tart", "gratin", "pilaf"]
STYLES = ["country", "smoky", "spring", "winter", "harvest", "lemon", "garlic", "herb", "spiced", "golden"]
FOODS = ["onion", "carrot", "leek", "potato", "tomato", "garlic", "thyme", "basil", "rice", "flour",
         "butter", "egg", "milk", "cheese", "lentil", "bean", "pepper", "fennel", "celery", "mushroom",
         "lemon", "apple", "pear", "honey"]


def png(seed):
    """A 16×16 PNG of one colour."""
    rng = random.Random(seed)
    pixel = bytes([rng.randrange(256), rng.randrange(256), rng.randrange(256)])
    raw = b"".join(b"\x00" + pixel * 16 for _ in range(16))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def write(path, data):
    full = os.path.join(HERE, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as file:
        file.write(data if isinstance(data, bytes) else (json.dumps(data, indent=1) + "\n").encode())


def main():
    rng = random.Random(1)
    images = 0

    def image():
        nonlocal images
        images += 1
        write(f"images/{images}", png(images))
        return images

    for ingredient in range(1, INGREDIENTS + 1):
        name = f"{FOODS[(ingredient - 1) % len(FOODS)]} no. {(ingredient - 1) // len(FOODS) + 1}"
        write(f"ingredients/{ingredient}", {"id": ingredient, "name": name, "images": [image()]})
    for recipe in range(1, RECIPES + 1):
        name = f"{STYLES[recipe % len(STYLES)]} {DISHES[(recipe // len(STYLES)) % len(DISHES)]} {recipe}"
        ingredients = sorted(rng.sample(range(1, INGREDIENTS + 1), rng.randint(3, 6)))
        pictures = [image() for _ in range(1 + recipe % 2)]
        write(f"recipes/{recipe}", {"id": recipe, "name": name, "ingredients": ingredients, "images": pictures})
    write("cookbook/1", {"id": 1, "title": "The Baton Cookbook", "recipes": list(range(1, RECIPES + 1))})


if __name__ == "__main__":
    main()
