#!/usr/bin/env python3
# Prints how much of a PNG screenshot is not background: "colors=N ink=F" where N is the number of
# distinct colors and F the fraction of pixels that differ from the most common one. Decodes
# 8-bit RGB and RGBA PNGs (what Chromium writes) with zlib alone.
import sys
import struct
import zlib
from collections import Counter


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG file")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                raise SystemExit(f"{path}: unsupported PNG (depth {depth}, color type {color})")
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    for line in rows[::2]:  # every other row and column is plenty to judge
        for x in range(0, width, 2):
            yield line[x * bpp:x * bpp + 3]


counts = Counter(pixels(sys.argv[1]))
total = sum(counts.values())
print(f"colors={len(counts)} ink={1 - counts.most_common(1)[0][1] / total:.4f}")
