// On/off switches read from the environment (KILN_TIME_PASSES, KILN_PROFILE, KILN_PERF_MAP), one
// rule for all of them.
#pragma once

namespace kiln::base {

/// Whether environment variable `name` is set to something other than "" or "0".
bool EnvFlag(const char* name);

}  // namespace kiln::base
