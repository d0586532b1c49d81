// Keras-like training API: layers, models, losses, metrics, callbacks, optimizers.
#pragma once

#include "kiln/autodiff.h"
#include "kiln/nn/callbacks.h"
#include "kiln/nn/checkpoint_callbacks.h"
#include "kiln/nn/initializers.h"
#include "kiln/nn/layer.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/merging_layers.h"
#include "kiln/nn/metrics.h"
#include "kiln/nn/model.h"
#include "kiln/nn/saving.h"
#include "kiln/nn/pooling_layers.h"
#include "kiln/nn/tensorboard.h"
#include "kiln/optim.h"
#include "kiln/variable.h"
