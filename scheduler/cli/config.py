"""``sluice config convert FILE``: the Sluice configuration a file becomes (layer 5).

Reads what ``sluice run --config`` reads (a SchedulerConfiguration, or Volcano's
``volcano-scheduler.conf`` or its ConfigMap), checks it against the registries of actions
and plugins as ``sluice run`` does, and prints it as a SchedulerConfiguration document.
A mistake, or what Sluice does not have, is one line on stderr and exit code 2 (by the
caller, :func:`scheduler.cli.main.main`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import yaml

from scheduler import app
from scheduler.config import configuration_document, load_configuration_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", required=True)
    convert = sub.add_parser(
        "convert",
        help="print the Sluice configuration a file becomes (Volcano's volcano-scheduler.conf "
        "included)",
        description="Read FILE as `sluice run --config` reads it (a SchedulerConfiguration, "
        "or Volcano's volcano-scheduler.conf or the ConfigMap holding it), check it, and print "
        "the SchedulerConfiguration it becomes.",
    )
    convert.add_argument("file", metavar="FILE")


def run_config(args: argparse.Namespace, out: TextIO | None = None) -> int:
    config = load_configuration_file(args.file)
    app.resolve(config)  # refuses unknown plugins and bad arguments as `sluice run` would
    yaml.safe_dump(
        configuration_document(config), out or sys.stdout, sort_keys=False, default_flow_style=False
    )
    return 0
