"""scripts/ab_table.py on synthetic gna-kernel-bench JSON: a case slower beyond the limit and
base's spread is flagged (exit 1); noise within base's own spread, faster cases and a case only
one side ran are not; missing files are a usage error (exit 2)."""
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]


def write(folder, name, rows):
    results = [dict(case=c, backend="hopper", pass_="fwd", schedule="auto", ms=ms, min_ms=ms,
                    **{"TFLOP/s": 1.0}) for c, ms in rows]
    for r in results:
        r["pass"] = r.pop("pass_")
    with open(os.path.join(folder, name), "w") as f:
        json.dump({"device": "test", "reps": 10, "warmup": 2, "graph": False, "results": results}, f)


def run(folder, *extra):
    p = subprocess.run([sys.executable, script, folder, *extra], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as d:
    # steady: +0.5%; slower: +5% in both rounds; noisy: +3% of means but base moves 6%;
    # faster: -4%; only_base: absent from the new runs.
    write(d, "1-base.json", [("steady", 10.0), ("slower", 10.0), ("noisy", 10.0), ("faster", 10.0),
                             ("only_base", 1.0)])
    write(d, "1-new.json", [("steady", 10.05), ("slower", 10.5), ("noisy", 10.6), ("faster", 9.6)])
    write(d, "2-base.json", [("steady", 10.0), ("slower", 10.0), ("noisy", 10.6), ("faster", 10.0),
                             ("only_base", 1.0)])
    write(d, "2-new.json", [("steady", 10.05), ("slower", 10.5), ("noisy", 10.6), ("faster", 9.6)])
    code, out = run(d)
    assert code == 1, out
    lines = {line.split("|")[1].strip(): line for line in out.splitlines()
             if line.startswith("| ") and "case" not in line}
    assert set(lines) == {"steady", "slower", "noisy", "faster"}, out
    assert lines["slower"].rstrip().endswith("| slower |") and "+5.0%" in lines["slower"], out
    for ok in ("steady", "noisy", "faster"):
        assert not lines[ok].rstrip(" |").endswith("slower"), lines[ok]
    assert "4 cases, 1 slower" in out, out
    code, out = run(d, "--limit", "6")
    assert code == 0 and "0 slower" in out, out

with tempfile.TemporaryDirectory() as d:
    code, out = run(d)
    assert code == 2 and "no ROUND-base.json" in out, out

print("ab_table: ok")
