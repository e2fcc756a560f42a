"""The command line: `python -m entmtp_vllm.vllm_plugin.compat [--vllm-source DIR] [--json] [--all]`
(`__main__.py` runs `main`). Exit status 0 when every entry matches, 1 when something differs,
2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from entmtp_vllm.vllm_plugin.compat.check import check_entries
from entmtp_vllm.vllm_plugin.compat.entries import CompatError
from entmtp_vllm.vllm_plugin.compat.manifest import manifest_sizes
from entmtp_vllm.vllm_plugin.compat.vllm_source import installed_source

EPILOG = """\
example: check the plugin against a vLLM release before installing it (nothing is imported):
  pip download vllm==0.33.0 --no-deps -d /tmp/v && unzip -q /tmp/v/vllm-*.whl 'vllm/*' -d /tmp/v/src \\
    && python -m entmtp_vllm.vllm_plugin.compat --vllm-source /tmp/v/src

exit status: 0 every entry matches, 1 something differs, 2 bad input (no vLLM source there)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m entmtp_vllm.vllm_plugin.compat",
        description="Check, by reading vLLM's source with ast (nothing imported, no GPU), that every vLLM class,\n"
                    "method, function, attribute and keyword the EntMTP plugin overrides, calls or reads is still\n"
                    "there, with the parameters the plugin expects. Prints one line per difference (DIFF ...) and\n"
                    "a summary line (N entries, M differ).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--vllm-source", metavar="DIR",
                        help="the folder holding the vllm package folder (or the vllm folder itself); "
                             "default: the installed vllm, located without importing it")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--all", action="store_true", help="also list the entries that match")
    args = parser.parse_args(argv)
    try:
        root = Path(args.vllm_source) if args.vllm_source else installed_source()
        src, results = check_entries(root)
    except CompatError as exc:
        print(f"compat: error: {exc}", file=sys.stderr)
        return 2
    differ = [(entry, findings) for entry, findings in results if findings]
    if args.json:
        print(json.dumps({
            "vllm_version": src.version,
            "vllm_source": str(src.root),
            "entries": len(results),
            "differ": len(differ),
            "manifest": manifest_sizes(),
            "findings": [asdict(f) for _, findings in differ for f in findings],
            **({"matching": [entry.label for entry, findings in results if not findings]} if args.all else {}),
        }, indent=2))
    else:
        for entry, findings in results:
            if findings:
                for finding in findings:
                    print(f"DIFF {finding}")
            elif args.all:
                print(f"ok   {entry.label}")
        print(f"{len(results)} entries, {len(differ)} differ (vLLM {src.version} at {src.root / 'vllm'})")
    return 1 if differ else 0
