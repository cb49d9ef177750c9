import time, torch, statistics, sys
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 4
shapes = [(768,256),(256,256),(256,256),(256,256),(1024,256),(256,1024)]*3 + [(8000,256)]
W = [torch.randn(s) * 0.05 for s in shapes]
B = [torch.randn(s[0]) for s in shapes]
P = {r: [torch.ops.mkldnn._reorder_linear_weight(w, r) for w in W] for r in (1, 4, 64)}
def cyc(f, reps=100):
    xs = [torch.randn(rows, s[1]) for s in shapes]
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for i in range(len(W)):
            f(i, xs[i])
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
def onednn(P):
    return lambda i, x: torch.ops.mkldnn._linear_pointwise(x, P[i], B[i], "none", [], "")
res = {}
for name, f in [("onednn packed64", onednn(P[64])), ("onednn packed4", onednn(P[4])), ("onednn packed1", onednn(P[1])),
                ("onednn plain", onednn(W)), ("mkl xW^T", lambda i, x: torch.nn.functional.linear(x, W[i], B[i])),
                ("mkl Wx^T", lambda i, x: torch.addmm(B[i][:, None], W[i], x.t()).t()),]:
    res[name] = cyc(f)
for k, v in res.items(): print(f"{k:18s} {v:.3f} ms per 19 products")
print("weights MB", sum(w.numel() for w in W) * 4 / 1e6)
