import sys, hashlib, inspect
sys.path.insert(0, sys.argv[1])
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from tensorfold.kernels import affine, qgemv, delta_rule, attention, norms
out = {}
for mod in (affine, qgemv):
    specs = mod._specs()
    specs = specs[0] if isinstance(specs, tuple) else specs
    for f, sig in specs:
        src = getattr(f, "_tf_source", None)
        if src is None:
            try:
                src = inspect.getsource(f)
            except Exception:
                src = "?"
        out[f.__name__] = hashlib.sha1(src.encode()).hexdigest()[:12]
for f, sig in delta_rule.COMPILE_SPECS:
    g = getattr(f, "py_func", f)
    try:
        out[g.__name__] = hashlib.sha1(inspect.getsource(g).encode()).hexdigest()[:12]
    except Exception as e:
        out[g.__name__] = "?"
for k in sorted(out):
    print(k, out[k])
