"""`worx experts list | show ID | verify`: inspect and re-verify the expert store."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "experts",
        help="list, show or verify the experts in the store",
        description="Inspect the write-once expert store (experts.store_dir, else "
        "trainer.store_dir, else <data_dir>/experts). 'verify' re-hashes every expert and "
        "reports; it exits 1 if any is refused.",
    )
    parser.add_argument("--store", help="expert store directory (default: from the config)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="one line per expert (id, domain and its name, params, sha256)",
        description="One line per expert. Domains are named from the domain table kept "
        "beside the store (<run>/domains.json of a demo run or up's data_dir, else the "
        "monitor's <run>/monitor/domains.json), else shown by id.",
    )
    listing.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    listing.set_defaults(func=run_list)
    show = actions.add_parser("show", help="the full manifest of one expert, as JSON")
    show.add_argument("expert_id", help="the expert's id")
    show.set_defaults(func=run_show)
    verify = actions.add_parser(
        "verify",
        help="re-hash every expert and report (exit 1 if any is refused)",
        description="Re-hash weights.safetensors of every expert and validate its manifest "
        "(and, with --trunk, its trunk fingerprint). Prints a JSON report. Nothing is "
        "moved unless --quarantine is given.",
    )
    verify.add_argument("--trunk", help="also check every expert was built on this trunk")
    verify.add_argument(
        "--quarantine",
        action="store_true",
        help="move experts that fail integrity checks to .quarantine/ (another trunk's or a "
        "newer schema's are only reported, never moved)",
    )
    verify.set_defaults(func=run_verify)
    quarantined = actions.add_parser("quarantined", help="the quarantined entries and why")
    quarantined.set_defaults(func=run_quarantined)


def _store(args: argparse.Namespace, fingerprint: str | None = None, quarantine: bool = False):
    """The store the arguments name; it must exist (a listing creates nothing)."""
    from topology.composition.expert_store import open_configured_store
    from topology.composition.paths import STORE_HINT, existing_dir, store_dir
    from topology.composition.worx_config import load_config

    config = load_config(args.config)
    if not config.experts.store_url:
        existing_dir(store_dir(config, args.store), "expert store", STORE_HINT)
    return open_configured_store(
        config, "experts", fingerprint, args.store, quarantine=quarantine, create=False
    )


def _domain_names(store_root) -> dict[str, str]:
    """Domain id -> name from the domain table beside the store: the run's domains.json,
    else the monitor's copy (<run>/monitor/domains.json)."""
    from pathlib import Path

    from router.naming import display_name
    from router.table_file import TableFileError, read_rows

    run = Path(store_root).parent
    for path in (run / "domains.json", run / "monitor" / "domains.json"):
        if path.is_file():
            try:
                return {row.domain_id: display_name(row) for row in read_rows(path)}
            except TableFileError:
                continue  # names are a courtesy; the listing stands without them
    return {}


def run_list(args: argparse.Namespace) -> int:
    from experts.store import ExpertRefused

    store = _store(args)
    names = _domain_names(store.root)
    rows = []
    for expert_id in store.ids():
        try:
            row = store.manifest(expert_id).public()
            row["domain_name"] = names.get(row["domain_id"])
            rows.append(row)
        except ExpertRefused as exc:
            rows.append({"expert_id": expert_id, "error": str(exc)})
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    print(f"{'expert_id':<28} {'domain_id':<20} {'name':<24} {'params':>10}  {'parent':<20} sha256")
    for row in rows:
        if "error" in row:
            print(f"{row['expert_id']:<28} ERROR {row['error']}")
            continue
        parent = row.get("parent_expert_id") or "-"
        name = row["domain_name"] or "-"
        print(
            f"{row['expert_id']:<28} {row['domain_id']:<20} {name:<24} {row['num_params']:>10}  "
            f"{parent:<20} {row['sha256'][:16]}"
        )
    print(f"# {len(rows)} experts in {store.where}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from experts.store import ExpertRefused

    try:
        manifest = _store(args).manifest(args.expert_id)
    except ExpertRefused as exc:
        print(f"worx experts show: {exc}", flush=True)
        return 1
    print(json.dumps(manifest.to_dict(), indent=2, sort_keys=True))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    fingerprint = None
    if args.trunk:
        from experts.trunk import trunk_fingerprint

        fingerprint = trunk_fingerprint(args.trunk)
    report = _store(args, fingerprint, quarantine=args.quarantine).verify()
    print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    return 1 if report.refused else 0


def run_quarantined(args: argparse.Namespace) -> int:
    store = _store(args)
    entries = store.quarantined()
    for entry in entries:
        print(json.dumps(entry, sort_keys=True))
    if not entries:  # on stderr: stdout stays JSON lines
        print(f"nothing quarantined in {store.where}", file=sys.stderr)
    return 0
