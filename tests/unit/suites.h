/* Every test suite, in the order they run. Add a line for a new suite. */
SUITE(util)
SUITE(text)
SUITE(roundtrip)
SUITE(pathological)
SUITE(pb)
SUITE(cli)
SUITE(interp)
SUITE(report)
