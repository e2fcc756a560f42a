"""Per dataset and round, EntMTP's tok/s ratios to no speculation (base, var) and var / base, from
ab_rotating.sh's JSON lines: python ab_summary.py FILE"""
import json, sys, statistics as st, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
by = collections.defaultdict(dict)
for x in rows: by[(x['ds'], x['r'])][x['arm']] = x['res']
for ds in sorted({k[0] for k in by}):
    rat = collections.defaultdict(list)
    for (d, r), arms in sorted(by.items()):
        if d != ds or 'none' not in arms: continue
        line = [f"r{r}", f"none {arms['none']['tok_s']}"]
        for a in ('base', 'var'):
            if a in arms:
                q = arms[a]['tok_s'] / arms['none']['tok_s']; rat[a].append(q)
                line.append(f"{a} {q:.3f} (dr {arms[a].get('drafted')}, gs {arms[a].get('gate_skips')}, pt {arms[a].get('cost',{}).get('per_token_ms')}, pr {arms[a].get('cost',{}).get('per_request_ms')})")
        if 'base' in arms and 'var' in arms: rat['var/base'].append(arms['var']['tok_s'] / arms['base']['tok_s'])
        print(ds, *line)
    for a, v in rat.items(): print(ds, a, 'median %.3f' % st.median(v), 'mean %.3f' % st.mean(v), 'n', len(v))
