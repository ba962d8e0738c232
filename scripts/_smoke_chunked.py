import sys, time, torch, normlab
from normlab.kernels import entropy as E
torch.manual_seed(0)
for v in (1000, 32768, 131072):
    x = torch.randn(256, v, device="cuda", dtype=torch.bfloat16).requires_grad_()
    t = torch.randn(256, v, device="cuda", dtype=torch.bfloat16)
    lab = torch.randint(0, v, (256,), device="cuda"); lab[::5] = -100
    for name, other in (("reverse_kl", t), ("soft_cross_entropy", t), ("cross_entropy", lab)):
        fn = getattr(normlab, name)
        t0 = time.time()
        a = fn(x, other, form="chunked", reduction="none"); (ga,) = torch.autograd.grad(a.sum(), x)
        torch.cuda.synchronize()
        b = fn(x, other, form="fused", reduction="none"); (gb,) = torch.autograd.grad(b.sum(), x)
        print(v, name, f"{time.time()-t0:.1f}s", float((a-b).abs().max()), float((ga.float()-gb.float()).abs().max()), flush=True)
