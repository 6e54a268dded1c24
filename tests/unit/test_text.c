#include "harness.h"
void suite_text(void);
void suite_text(void) {}
