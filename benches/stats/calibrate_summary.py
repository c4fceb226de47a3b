#!/usr/bin/env python3
"""Per-cell summary of benches/stats/calibrate.sh outputs (its per-run lines), beyond its own table.

For each mode, noise and figure: how many intervals lay wholly above and wholly below 1, the mean
log B/A with its standard error (a bias shows here long before it shows in the rates), the median
half-width of the log interval, and, with --effect R (a true B/A, e.g. 1.019 for DIFF=1, whose B
loops 2% more and takes about 1.9% longer), the detection rate each run's own interval width
predicts: the estimate ~ N(log R, SE) with SE = half-width / t(0.975, rounds - 1), so a run
detects when the estimate exceeds its half-width. Observed and predicted rates agreeing is what
"detected at the rates the MDE states" means.

Usage: calibrate_summary.py [--effect R] FILE... (several files of one cell are pooled, e.g. runs
1-20 and 21-40 of FIRST=21).
"""
import argparse, math, re, statistics as st, sys

# t(0.975, df): a verdict has 5-17 rounds here; the bursty correction lowers df a little, which
# this ignores (it makes the prediction slightly high).
T975 = {4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201,
        12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093}
LINE = re.compile(r'^\s+(\w+)\s+(\w+)\s+run (\d+): (\w+) B/A ([\d.]+) \[([\d.]+), ([\d.]+)\], '
                  r'MDE ([\d.]+)%(.*?), (\d+) rounds')
# A side figure's MDE is printed since calibrate.sh of 2026-11-28; older outputs lack it.
OTHER = re.compile(r'; (\w+) ([\d.]+) \[([\d.]+), ([\d.]+)\](?:, MDE ([\d.]+)%)?')


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--effect', type=float, help='the true B/A, for the predicted detection rate')
    ap.add_argument('files', nargs='+')
    args = ap.parse_args()
    cells = {}
    for path in args.files:
        for line in open(path):
            m = LINE.match(line)
            if not m:
                continue
            mode, noise, _run, fig, r, lo, hi, mde, rest, rounds = m.groups()
            cells.setdefault((mode, noise, fig), []).append(
                (float(r), float(lo), float(hi), int(rounds), float(mde)))
            for o in OTHER.finditer(rest):
                side_mde = float(o.group(5)) if o.group(5) else None
                cells.setdefault((mode, noise, o.group(1)), []).append(
                    (float(o.group(2)), float(o.group(3)), float(o.group(4)), int(rounds), side_mde))
    if not cells:
        raise SystemExit('calibrate_summary: no run lines of calibrate.sh in ' + ', '.join(args.files))
    head = f'{"mode":<12} {"noise":<9} {"figure":<7} {"runs":>4} {"above 1":>7} {"below 1":>7}  ' \
           f'{"mean log B/A (se)":<18} {"half-width":>10} {"MDE":>7}'
    print(head + ('  predicted detection' if args.effect else ''))
    for (mode, noise, fig), v in cells.items():
        logs = [math.log(r) for r, *_ in v]
        n = len(v)
        se = st.stdev(logs) / math.sqrt(n) if n > 1 else float('nan')
        widths = [(math.log(hi) - math.log(lo)) / 2 for _, lo, hi, *_ in v]
        # The median MDE of the runs that printed one (a side figure's only in newer outputs).
        mdes = [mde for *_, mde in v if mde is not None]
        mde = f'{st.median(mdes):.2f}%' if mdes else '-'
        row = (f'{mode:<12} {noise:<9} {fig:<7} {n:>4} {sum(lo > 1 for _, lo, *_ in v):>7} '
               f'{sum(hi < 1 for _, _, hi, *_ in v):>7}  {st.mean(logs) * 100:+.2f}% ({se * 100:.2f}%)'
               f'{"":<3} {st.median(widths) * 100:>9.2f}% {mde:>7}')
        if args.effect:
            delta = math.log(args.effect)
            p = [0.5 * (1 + math.erf(T975.get(k - 1, 2.09) * (delta / w - 1) / math.sqrt(2)))
                 for (_, _, _, k, _), w in zip(v, widths)]
            row += f'  {sum(p) / n * 100:>5.0f}%'
        print(row)


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:
        # Piped into head: the reader has what they wanted.
        sys.exit(0)
