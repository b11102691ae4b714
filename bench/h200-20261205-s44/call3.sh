# Call 3 of session 44 (the command as run, on the machine still warm from call 2): the six GPU
# test binaries of d8689ed (its default PTX = 66aaf8d's), first at their defaults, then with the
# k split, the warpgroup MMA, its swapped split and the early weights forced in every model.
# The second setting was cut by the call's limit (the session's device time ran out).
SETTINGS="base:FLASHLANE_AB=1 wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_EARLY_WEIGHTS=1" timeout 380 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1; echo rc=$?; cat $OUT/tests/*/summary.txt
