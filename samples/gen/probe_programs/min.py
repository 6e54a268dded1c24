# minimal reproductions of the false alarm on s.vocab_argmax.tp4
def mk(f): return lambda bug: f
def m(name, f, base, args, out=P(), ins=(P(None, "tp"),)):
    variants(name, "tp4", {"tp": 4}, mk(f), ins, out, base, args, [])
X = R(8, 64)
m("m.gather_local_max_then_max", lambda x: lax.all_gather(x.max(1), "tp", axis=1).max(1), lambda x: x.max(1), (X,))
m("m.gather_local_sum_then_sum", lambda x: lax.all_gather(x.sum(1), "tp", axis=1).sum(1), lambda x: x.sum(1), (X,))
m("m.gather_local_max_stack", lambda x: lax.all_gather(x.max(1), "tp", axis=1), lambda x: x.reshape(8, 4, 16).max(2), (X,))
m("m.gather_local_sum_stack", lambda x: lax.all_gather(x.sum(1), "tp", axis=1), lambda x: x.reshape(8, 4, 16).sum(2), (X,))
m("m.gather_local_max_tiled_then_max", lambda x: lax.all_gather(x.max(1, keepdims=True), "tp", axis=1, tiled=True).max(1), lambda x: x.max(1), (X,))
m("m.gather_local_sum_1d", lambda x: lax.all_gather(x.sum(), "tp").sum(), lambda x: x.sum(), (R(64),), ins=(P("tp"),))
