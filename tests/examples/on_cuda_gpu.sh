#!/bin/sh
# Runs the command given when a CUDA GPU is visible (nvidia-smi lists one); otherwise says
# so and exits 77, which the tests that use it count as skipped.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "on_cuda_gpu: no CUDA GPU visible, skipped"
  exit 77
fi
exec "$@"
