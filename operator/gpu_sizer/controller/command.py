"""Argument parsers for the `gpu-sizer` subcommands of this package. Heavy imports stay inside
handlers so that the offline commands stay fast."""

from __future__ import annotations

import argparse


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this package's subcommands (placeholder until implemented)."""
