import sys, subprocess, re, hashlib, os, importlib, json, tempfile
root = sys.argv[1]
sys.path.insert(0, root)
os.chdir(root)
from tests.kernels import test_compile as tc
tc._setup_compiler()
from numba import cuda
from tensorfold.kernels import _device
_device.pdl_target(True)
want = {"affine": ["_splitk_reduce_py", "qgemv_tc_b4_g64_n1_w4_m2_u4_bf16_p", "qgemv_tc_b4_g64_n2_w4_m2_u4_bf16_p", "qgemv_tc_b4_g64_n1_w8_m2_u4_bf16_p"],
        "qgemv": ["qgemv3_b4_g64_n1_w4_m1_c16_u4_d1", "qgemv3_b4_g64_n2_w4_m1_c16_u4_d1"], "gemm": ["tc3gemm_b4_g64_bf16_4x1x2x4x3", "tc3gemm_b8_g64_bf16_4x1x2x4x3"]}
out = {}
for m, names in want.items():
    mod = importlib.import_module(f"tensorfold.kernels.{m}")
    for fn, sig in mod.COMPILE_SPECS:
        n = getattr(fn, "__name__", "")
        if names is not None and n not in names:
            continue
        fn = getattr(fn, "py_func", fn)
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
        ptx = re.sub(r"^\.version \d+\.\d+", ".version 9.0", ptx, count=1, flags=re.M)
        d = tempfile.mkdtemp()
        open(f"{d}/k.ptx", "w").write(ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True)
        if r.returncode:
            out[f"{m}.{n}"] = "ptxas error"; continue
        dis = subprocess.run(["nvdisasm", f"{d}/k.cubin"], capture_output=True, text=True).stdout
        ins = [re.sub(r"^\s+/\*[0-9a-f]+\*/\s+", "", l).split(";")[0] for l in dis.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", l)]
        ins = [re.sub(r"_Z\w+|\$\w+", "SYM", i) for i in ins]
        out[f"{m}.{n}"] = (len(ins), hashlib.md5("\n".join(ins).encode()).hexdigest()[:12], ins.count("GRIDDEPCONTROL") if False else sum("DEPCTRL" in i or "griddep" in i.lower() or "ACQBULK" in i or "PREEXIT" in i for i in ins))
print(json.dumps(out))
