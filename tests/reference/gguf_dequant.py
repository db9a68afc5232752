"""Reference decoding of GGUF tensors with the `gguf` package (llama.cpp's own Python
reader). Writes each named tensor, dequantized to float32 in ggml order, to OUT/<name>.f32
and prints one line per tensor: name, ggml type, element count.

usage: gguf_dequant.py MODEL.gguf OUT_DIR NAME [NAME...]
"""
import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main() -> int:
    model, out = sys.argv[1], pathlib.Path(sys.argv[2])
    names = sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    reader = GGUFReader(model)
    by_name = {t.name: t for t in reader.tensors}
    for name in names:
        t = by_name[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        values.tofile(out / f"{name}.f32")
        print(name, t.tensor_type.name, values.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
