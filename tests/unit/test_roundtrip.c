#include "harness.h"
void suite_roundtrip(void);
void suite_roundtrip(void) {}
