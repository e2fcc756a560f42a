"""Reliability of the head probabilities: per probability bin and per depth, the mean head
probability against the share accepted (calibration_collect.py's files as arguments)."""
import sys, numpy as np
for f in sys.argv[1:]:
    d = np.loadtxt(f)
    p, dep, hit = d[:,0], d[:,1], d[:,2]
    head = p >= 0
    print(f, "nodes", len(p), "head", head.sum(), "lookup", (~head).sum(), "lookup hit %.3f" % hit[~head].mean() if (~head).any() else "")
    ph, hh, dh = p[head], hit[head], dep[head]
    print("  global scale acc/pred = %.3f" % (hh.sum()/ph.sum()))
    bins = [0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1.01]
    for lo, hi in zip(bins[:-1], bins[1:]):
        m = (ph >= lo) & (ph < hi)
        if m.sum(): print(f"  p[{lo:.1f},{hi:.1f}) n={m.sum():4d} mean p {ph[m].mean():.3f} hit {hh[m].mean():.3f} ratio {hh[m].mean()/ph[m].mean():.2f}")
    for k in sorted(set(dh)):
        m = dh == k
        print(f"  depth {int(k)} n={m.sum():4d} mean p {ph[m].mean():.3f} hit {hh[m].mean():.3f}")
