// Kept for the engine's own includes; the declarations are public (kev/text_file.h).
#pragma once

#include "kev/text_file.h"
