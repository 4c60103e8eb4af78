// The samplers' network call as a CUDA graph (--cuda-graphs, models/cuda_graph.h): a sampler calls
// the same network hundreds of times on inputs of one shape, each call a few hundred kernel
// launches. graphed(net) runs the first `eager_calls` calls as they are (lazy initialisation:
// cuBLAS handles and workspaces, kernel choices), then captures one call on static copies of
// (x, t, y) and replays it for every later call of the same shapes and dtypes, copying the inputs
// in and cloning the output out (samplers such as Heun or dopri5 keep several outputs alive). Each
// shape (and dtype) gets its own eager calls and graph, kept while the wrapper lives. The kernels
// are those of an eager call, so the results are equal to eager calls bit for bit where the kernels
// are deterministic (GPU test SampleGraph.ReplayEqualsEagerSampling). A graph holds the addresses
// of the model's parameters: the model must not move (to(), a reload) while the wrapper lives.
// generate() builds one wrapper a call, so each batch of a FID run captures anew (two eager calls
// and a capture out of the batch's 250 or so).
#pragma once
#include <cstdint>

#include "samplers/guidance.h"

namespace nala::samplers {

// Throws std::invalid_argument on the first call whose x is not on a CUDA device (or in a build
// without CUDA), naming the device.
LabelledNet graphed(LabelledNet net, int64_t eager_calls = 2);

}  // namespace nala::samplers
