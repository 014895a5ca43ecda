"""perfuser.py STACKS TOP [REQUESTS]: where a proxy's user time goes.

STACKS is `perf script -F ip,sym` of a `perf record -g` (cpu-clock at
-F 2000, so one sample is 500 us of CPU). Each user-space sample is charged
to the nearest infergate function on its stack, so a runtime or library
helper (map access, memmove, malloc) counts for the code that called it;
samples with no infergate frame are "(runtime) <leaf>" (the scheduler,
the collector). With REQUESTS (the requests served while perf recorded)
the figures are also microseconds per request, and the last lines sum
them by package.
"""
import collections
import sys

PREFIX = "github.com/infergate/infergate/"


def samples(path):
    with open(path) as f:
        for block in f.read().split("\n\n"):
            frames = [l.strip().split(None, 1) for l in block.strip().split("\n")]
            frames = [f for f in frames if len(f) == 2]
            if frames:
                yield frames


def package(fn):
    if fn.startswith("(runtime)"):
        return "(runtime)"
    name = fn.split("(")[0].rstrip(".")
    return name.rsplit(".", 1)[0] if "." in name else name


def main():
    path, top = sys.argv[1], int(sys.argv[2])
    reqs = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    per = collections.Counter()
    total = user = 0
    for frames in samples(path):
        total += 1
        if frames[0][0].startswith("ffffffff"):  # a kernel leaf
            continue
        user += 1
        own = next((sym[len(PREFIX):] for _, sym in frames
                    if sym.startswith(PREFIX) and "internal/rawsock" not in sym), None)
        per[own or "(runtime) " + frames[0][1][:60]] += 1
    if not total:
        sys.exit("perfuser.py: no samples")

    def us(n):
        return " %7.3f us/req" % (n * 500 / reqs) if reqs else ""

    print("samples %d, user %.1f %%;%s total,%s user" % (total, 100 * user / total, us(total), us(user)))
    for fn, n in per.most_common(top):
        print("%6.2f %%%s  %s" % (100 * n / total, us(n), fn))
    pkgs = collections.Counter()
    for fn, n in per.items():
        pkgs[package(fn)] += n
    print("by package:")
    for p, n in pkgs.most_common(12):
        print("%6.2f %%%s  %s" % (100 * n / total, us(n), p))


if __name__ == "__main__":
    main()
