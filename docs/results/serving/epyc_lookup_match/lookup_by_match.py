"""How often a prompt-lookup token is accepted, by the length of the suffix match that proposed
it and its depth in the chain (its parent accepted), in one in-process EntMTP engine: the run
of `policy_ab.py entmtp PROMPTS SEQS [JSON]`, with the proposer's lookup and its verification
record read on the way (nothing changes what the engine drafts or accepts).

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_lookup_match/lookup_by_match.py PROMPTS SEQS [JSON]

Prints policy_ab.py's JSON line, then one row per (match length, depth): lookup tokens verified
with their parent accepted ("tried"), accepted, and the rate. `LookupConfig.max_ngram` (4) caps
the match length: 4 means "4 or more".
"""

from __future__ import annotations

import collections
import runpy
import sys
from pathlib import Path

from entmtp_vllm.vllm_plugin.proposer import EntMTPProposer

_last_match: dict[str, int] = {}
_table: dict[tuple[int, int], list[int]] = collections.defaultdict(lambda: [0, 0])  # (match, depth): tried, accepted
_lookup, _record_lookup = EntMTPProposer._lookup, EntMTPProposer.record_lookup


def _reading_lookup(self, request):
    match = _lookup(self, request)
    if request is not None:
        _last_match[request.req_id] = match.match_length
    return match


def _reading_record(self, req_id, proposed, accepted):
    match = _last_match.get(req_id)
    if match and proposed:
        for k in range(min(proposed, accepted + 1)):  # the accepted tokens and the first miss
            row = _table[(match, k + 1)]
            row[0] += 1
            row[1] += int(k < accepted)
    return _record_lookup(self, req_id, proposed, accepted)


def main() -> None:
    EntMTPProposer._lookup = _reading_lookup
    EntMTPProposer.record_lookup = _reading_record
    sys.argv = ["policy_ab.py", "entmtp", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).with_name("policy_ab.py")), run_name="__main__")
    print("match depth tried accepted rate")
    for (match, depth), (tried, accepted) in sorted(_table.items()):
        print(match, depth, tried, accepted, f"{accepted / tried:.2f}")
    by_match = collections.defaultdict(lambda: [0, 0])
    for (match, _), (tried, accepted) in _table.items():
        by_match[match][0] += tried
        by_match[match][1] += accepted
    print("by match length:", {m: f"{a / t:.2f} of {t}" for m, (t, a) in sorted(by_match.items())})


if __name__ == "__main__":
    main()
