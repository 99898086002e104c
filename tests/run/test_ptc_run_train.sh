#!/usr/bin/env bash
# ptc-run --train on a resnet-like step (train_resnet_block.ptir), planned
# for CUDA without a GPU: it prints the forward's and the backward's kernels,
# and every operand of their convolutions and convolution backwards is
# channels-last ({n, 1, w*c, c} strides), with no conversion kernel.
#
#   test_ptc_run_train.sh PTC_RUN TESTS_RUN_DIR
set -u
out=$("$1" --train --emit=kernels --backend cuda "$2/train_resnet_block.ptir" 2>&1) || {
    echo "FAIL: ptc-run --train exited $?"; echo "$out" | head -40; exit 1; }
convs=$(grep -E '^  n[0-9]+ convolution' <<<"$out")
operands=$(grep -oE 'buf[0-9]+\[[0-9,]+\]\{[0-9,]+\}' <<<"$convs" | wc -l)
channels_last=$(grep -oE 'buf[0-9]+\[[0-9,]+\]\{[0-9]+,1,[0-9]+,[0-9]+\}' <<<"$convs" | wc -l)
failed=0
grep -q '^# forward$' <<<"$out" && grep -q '^# backward$' <<<"$out" || { echo "FAIL: not both programs"; failed=1; }
[ "$operands" -eq 15 ] || { echo "FAIL: $operands convolution operands, want 15"; failed=1; }
[ "$channels_last" -eq "$operands" ] || { echo "FAIL: $channels_last of $operands operands channels-last"; echo "$convs"; failed=1; }
grep -q to_channels_last <<<"$out" && { echo "FAIL: a conversion kernel"; failed=1; }
# --train prints a compile's stage: it refuses to run or to print the graph
"$1" --train --emit=ptir "$2/train_resnet_block.ptir" >/dev/null 2>&1 && { echo "FAIL: --train --emit=ptir accepted"; failed=1; }
exit $failed
