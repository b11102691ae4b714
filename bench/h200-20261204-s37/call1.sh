#!/usr/bin/env bash
# Session 37, call 1: session 36's prepared script, run as it was (the half-block k split).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
exec bash bench/h200-20261204-s36/next_s37a.sh "$@"
