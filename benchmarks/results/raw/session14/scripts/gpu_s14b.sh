#!/usr/bin/env bash
# Session 14, call 2 (one GPU), from a `git archive`: the same runs as call 1 (gpu_s14a.sh) on the prefetch form with
# a tile split into parts inside a block.
TAG=s14b exec bash "$(dirname "$0")/gpu_s14a.sh"
