#pragma once
#include <argon2.h>
