"""`worx broker`: run the embedded broker standalone and print its bootstrap address."""

from __future__ import annotations

import argparse
import signal
import threading


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run the embedded Kafka-compatible broker (Tansu) until Ctrl-C",
        description="Start the embedded in-memory broker on a loopback port, create the worx "
        "topics, print the bootstrap address, and run until Ctrl-C or SIGTERM. Data lives "
        "in memory only: stopping the broker loses it.",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from topology.composition.embedded_broker import EmbeddedBroker
    from topology.composition.topics import ensure_topics
    from topology.composition.worx_config import load_config

    config = load_config(args.config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with EmbeddedBroker(host=args.host, port=args.port or None) as broker:
        ensure_topics(
            {"bootstrap.servers": broker.bootstrap_servers},
            prefix=config.kafka.topic_prefix,
            partitions=config.kafka.partitions,
        )
        print(broker.bootstrap_servers, flush=True)
        print(
            f"# export WORX_KAFKA__BOOTSTRAP_SERVERS={broker.bootstrap_servers}  (Ctrl-C stops)",
            flush=True,
        )
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0
