"""Metadata calls on small files, per call: `meta.py DIR N WRITER`.

Makes DIR, writes N one-line files in it the way WRITER does (`py`:
Python's open/write/close; `c`: C stdio's fopen/fputs/fclose, through
ctypes), then stats each, opens and closes each, and unlinks each. Prints
one line: `create C stat S open_close O unlink U`, microseconds per call.
"""
import ctypes
import os
import sys
import time

d, n, writer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.mkdir(d)
names = [f"{d}/f{i:06d}" for i in range(n)]
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]


def timed(f):
    t = time.perf_counter()
    for p in names:
        f(p)
    return 1e6 * (time.perf_counter() - t) / n


def write_py(p):
    with open(p, "w") as f:
        f.write("a small file\n")


def write_c(p):
    f = libc.fopen(p.encode(), b"w")
    if not f:
        raise OSError(ctypes.get_errno(), p)
    libc.fputs(b"a small file\n", f)
    libc.fclose(f)


def open_close(p):
    os.close(os.open(p, os.O_RDONLY))


create = timed(write_py if writer == "py" else write_c)
stat = timed(os.stat)
oc = timed(open_close)
unlink = timed(os.unlink)
os.rmdir(d)
print(f"create {create:.3f} stat {stat:.3f} open_close {oc:.3f} unlink {unlink:.3f}")
