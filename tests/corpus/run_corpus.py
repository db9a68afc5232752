#!/usr/bin/env python3
"""Run kev-cli on every case of a corpus written by make_corpus.py; print the mismatches.

    run_corpus.py OUT path/to/kev-cli [--jobs 2] [--group gguf] [--only SUBSTRING] [--all]

A case passes when kev-cli ends within the case's time bound, not by a signal, with the
expected exit code, every expected fragment in stderr, and stdout as the case says.
Prints one row per failing case (--all: per case), a count per group, and exits 1 when
any case fails.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def arg_bytes(a):
    return bytes.fromhex(a["hex"]) if isinstance(a, dict) else os.fsencode(a)


def check(case, rc, out, err, timed_out):
    """The reasons the case failed (empty: it passed)."""
    why = []
    if timed_out:
        return [f"no exit within {case['timeout_s']} s (killed)"]
    if rc < 0:
        why.append(f"killed by signal {-rc} ({signal.Signals(-rc).name})")
    elif rc != case["exit"]:
        why.append(f"exit {rc}, expected {case['exit']}")
    text = err.decode("utf-8", "replace")
    missing = [f for f in case["stderr"] if f not in text]
    if missing:
        why.append("stderr lacks " + ", ".join(repr(f) for f in missing))
    mode = case["stdout"]
    if mode == "empty" and out.strip():
        why.append("printed an answer: " + repr(out.decode("utf-8", "replace")[:60]))
    elif mode == "nonempty" and not out.strip():
        why.append("printed nothing")
    elif mode == "json":
        try:
            json.loads(out.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            why.append(f"stdout is not valid JSON ({e.__class__.__name__})")
    return why


def run_case(case, kev_cli):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    argv = [os.fsencode(kev_cli)] + [arg_bytes(a) for a in case["args"]]
    start = time.monotonic()
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
    except OSError as e:  # kev-cli being relinked, say
        return dict(case=case, rc=-999, out=b"", err=str(e).encode(), seconds=0.0, why=[f"could not start: {e}"])
    try:
        out, err = p.communicate(timeout=case["timeout_s"])
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        timed_out = True
    return dict(case=case, rc=p.returncode, out=out, err=err, seconds=time.monotonic() - start,
                why=check(case, p.returncode, out, err, timed_out))


def first_line(err):
    lines = [l for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
    return lines[0] if lines else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("kev_cli")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--group")
    ap.add_argument("--only")
    ap.add_argument("--all", action="store_true", help="a row for every case, passing ones too")
    ap.add_argument("--json", help="write every result (id, exit, stderr, why) to this file")
    args = ap.parse_args()
    with open(os.path.join(args.out, "manifest.jsonl")) as f:
        cases = [json.loads(l) for l in f if l.strip()]
    if args.group:
        cases = [c for c in cases if c["group"] == args.group]
    if args.only:
        cases = [c for c in cases if args.only in c["id"]]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, args.kev_cli), cases))
    wall = time.monotonic() - start

    groups = {}
    for r in results:
        g = groups.setdefault(r["case"]["group"], [0, 0])
        g[0] += 1
        g[1] += not r["why"]
    rows = [r for r in results if r["why"] or args.all]
    if rows:
        print(f"{'case':<52} {'want':>4} {'got':>4}  why | stderr (first line)")
        for r in rows:
            c = r["case"]
            status = "; ".join(r["why"]) or "ok"
            print(f"{c['id']:<52} {c['exit']:>4} {r['rc']:>4}  {status} | {first_line(r['err'])[:200]}")
        print()
    for g, (n, ok) in groups.items():
        print(f"{g:<12} {ok:>4} / {n:<4} pass")
    total_ok = sum(ok for _, ok in groups.values())
    print(f"{'total':<12} {total_ok:>4} / {len(results):<4} pass   ({wall:.0f} s wall, "
          f"slowest {max((r['seconds'] for r in results), default=0):.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps({"id": r["case"]["id"], "rc": r["rc"], "why": r["why"],
                                    "stderr": r["err"].decode("utf-8", "replace")[:2000],
                                    "seconds": round(r["seconds"], 2)}) + "\n")
    return 1 if total_ok != len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
