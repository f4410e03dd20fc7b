"""``pacore bench viewer``: how fast ``pacore view`` opens a big run folder in Chromium, beside a small one.

The folders are made by ``viewer_folder.make_folder`` (the real row format, no model) into ``--output`` (kept, and
reused by the next run) or a temporary folder. The last line printed is the command kit's JSON summary with the
medians of the big folder, the small one's, and ``page_open_ratio`` (big over small).
"""

from __future__ import annotations

import argparse

from pacore_graph.command_kit import add_output_argument, comma_list, print_summary, summarised

COMMAND = "bench viewer"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "viewer",
        help="pacore view in Chromium: a 1,000-problem [32, 4] folder opened beside a 10-problem one",
    )
    parser.add_argument("--problems", type=int, default=1000, help="problems of the big folder (default 1000)")
    parser.add_argument("--baseline", type=int, default=10, help="problems of the small folder (default 10)")
    parser.add_argument("--rounds", default="32,4", help="the folders' schedule (default 32,4)")
    parser.add_argument("--repeats", type=int, default=5, help="opens of each folder, alternating (default 5)")
    parser.add_argument(
        "--target", type=float, default=2.0, help="seconds the big folder's cold open must stay under (default 2)"
    )
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser (default Debian's)")
    add_output_argument(parser, "keep the generated folders here and reuse them (default: a temporary folder)")
    parser.set_defaults(func=main)


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.viewer_bench import MEASURES, run
    from pacore_benchmarks.perf.viewer_folder import make_folder
    from pacore_graph.command_kit import item_counts
    from pacore_graph.extend import parse_rounds

    rounds = parse_rounds(",".join(comma_list(args.rounds)))
    if args.problems < 1 or args.baseline < 1 or args.repeats < 1:
        raise ValueError("--problems, --baseline and --repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="pacore-viewer-") as scratch:
        root = Path(args.output or scratch)
        label = "-".join(map(str, rounds))
        folders = [(make_folder(root / f"viewer-{n}x{label}", n, rounds), n) for n in (args.baseline, args.problems)]
        small, big = run(folders, args.repeats, args.chromium)

    table = Table(title=f"pacore view, [{label.replace('-', ', ')}], medians of {args.repeats} (seconds)")
    table.add_column("measure")
    table.add_column(f"{args.baseline} problems", justify="right")
    table.add_column(f"{args.problems} problems", justify="right")
    for name in MEASURES:
        table.add_row(name, f"{small.median(name):.3f}", f"{big.median(name):.3f}")
    table.add_row("index bytes", f"{small.index_bytes:,}", f"{big.index_bytes:,}")
    table.add_row("first load", " ".join(small.first_load), " ".join(big.first_load))
    Console().print(table)
    figures: dict[str, object] = {name: big.median(name) for name in MEASURES}
    figures["baseline"] = {name: small.median(name) for name in MEASURES}
    figures["page_open_ratio"] = round(big.median("page_open_s") / max(small.median("page_open_s"), 1e-6), 2)
    figures["index_bytes"] = big.index_bytes
    figures["first_load"] = big.first_load
    missed = big.median("cold_open_s") >= args.target
    error = (
        f"the big folder's cold open took {big.median('cold_open_s'):.2f} s, over {args.target} s" if missed else None
    )
    counts = item_counts(2, 0, problems=args.problems, baseline=args.baseline, repeats=args.repeats)
    return print_summary(COMMAND, 1 if missed else 0, output=args.output, counts=counts, error=error, **figures)
