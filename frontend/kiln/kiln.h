// kiln: the public API. `#include <kiln/kiln.h>` brings Tensor<B, R, K>, the backend tags, the
// activations, modules and nn. docs/api.md lists every op.
#pragma once

#include "frontend/activation.h"
#include "frontend/backend.h"
#include "frontend/error.h"
#include "frontend/kind.h"
#include "frontend/module.h"
#include "frontend/nn/activations.h"
#include "frontend/nn/attention.h"
#include "frontend/nn/conv.h"
#include "frontend/nn/dropout.h"
#include "frontend/nn/embedding.h"
#include "frontend/nn/init.h"
#include "frontend/nn/linear.h"
#include "frontend/nn/loss.h"
#include "frontend/nn/norm.h"
#include "frontend/optim/clip.h"
#include "frontend/optim/optimizer.h"
#include "frontend/optim/scheduler.h"
#include "frontend/random.h"
#include "frontend/tensor.h"
