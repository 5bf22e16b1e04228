#!/usr/bin/env bash
# session 55, second call: 9B and 27B decode at one stream, chunks-in-a-block (TENSORFOLD_GEMV3_KIN=1) against the
# split-K form, in-process A/B (two rounds, graphs recaptured per setting).
. benchmarks/_dec.sh
begin s55b 9b 27b
wait
ab 9b 1 230 "TENSORFOLD_GEMV3_KIN=0;TENSORFOLD_GEMV3_KIN=1"
ab 27b 1 260 "TENSORFOLD_GEMV3_KIN=0;TENSORFOLD_GEMV3_KIN=1"
