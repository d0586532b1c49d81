// The common public API in one include.
#pragma once

#include "kiln/attrs.h"
#include "kiln/autodiff.h"
#include "kiln/control_flow.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/profiler.h"
#include "kiln/ops.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/variable.h"
#include "kiln/version.h"
#include "kiln/warning.h"
