#include "harness.h"
void suite_cli(void);
void suite_cli(void) {}
