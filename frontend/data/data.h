// kiln::data: datasets, transforms and the DataLoader (docs/training.md, section "Data").
#pragma once

#include "frontend/data/csv.h"
#include "frontend/data/dataset.h"
#include "frontend/data/idx.h"
#include "frontend/data/loader.h"
#include "frontend/data/mnist.h"
