// The benchmark driver lands with the benchmark commit; see scripts/bench.sh.
print("tokenbroker-bench: not built yet")
