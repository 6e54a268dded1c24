#include "harness.h"
void suite_pathological(void);
void suite_pathological(void) {}
