#!/usr/bin/env bash
# Prepared in session 52 for session 53 (first call, a fresh machine, LIMIT ~540; an H200 if one comes).
# Session 52 (H100) made load depth 2 the default for 16-row qgemv launches (9B +7 % at 16-32 streams, 27B +19 % at
# 16) and left 32-row launches opt-in. At 32 streams the GDN step is next (session 51: 1.74 ms of a 9B step, 63 % of
# copy). Its lean kernel takes 127 registers, so 4 blocks of 128 threads an SM, each moving an 8 KB state slice in
# and out in turn. TENSORFOLD_GDN_STEP_REGS=96/80/64 (built in session 52, never run on a GPU) caps the registers
# for 5 / 6 / 8 blocks an SM, with 96-232 bytes of spills a thread. Same PTX, so the same bits.
# Predictions (H100): the 9B step at 32 streams (bench_kernels_b "gdn_recurrent step", B=32) -> 15-30 % less time at
# 80 or 64; 9B decode at 32 streams 3,040 -> 3,100-3,200 tok/s.
# (1) the GPU bit test of the caps (9B heads, 32 streams) beside the synth checkpoints;
# (2) the step kernel at 1 / 8 / 32 streams, 9B and 27B heads, uncapped and at each cap;
# (3) 9B and 27B decode at 16 / 32 streams: uncapped vs the caps (one process, two rounds);
# (4) with what is left, issue 4's matrix at 9B on the session-52 defaults (`full`).
. benchmarks/_dec.sh
begin s53a 9b 27b
ptest cap 200 tests/kernels/test_gpu_delta_sample.py -k "register_cap or step_vs_twin" -s &
wait
echo "== tests at $((SECONDS - t0)) s"
for c in 0 96 80 64; do
    TENSORFOLD_GDN_STEP_REGS=$c timeout 90 python3 benchmarks/bench_kernels_b.py --only gdn --models 9B,27B \
        --out "$R/gdn_r$c.md" > "$R/gdn_r$c.txt" 2>&1
    echo "== gdn cap $c rc $? at $((SECONDS - t0)) s"; grep -h "step (in place)" "$R/gdn_r$c.md" | cut -c1-110
done
pack
for g in 9b 27b; do
    ab $g 16,32 160 "TENSORFOLD_GDN_STEP_REGS=0;TENSORFOLD_GDN_STEP_REGS=80;TENSORFOLD_GDN_STEP_REGS=64" || break
done
full 9b 200
echo "== done at $((SECONDS - t0)) s"; pack
