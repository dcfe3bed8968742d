// spank_bellows.so: the SPANK plugin that adds --elastic=MIN:MAX and --elastic-policy=FILE to
// sbatch, salloc and srun (and #SBATCH directives). A thin extern "C" shim over
// bellows::spank (options.hpp), which does all the checking and is tested without Slurm.
//
// Where each SPANK callback runs (slurm/spank.h has the full call order):
//   slurm_spank_init           sbatch/salloc/srun and slurmstepd: registers both options
//   slurm_spank_init_post_opt  the same, once the options are read: validates them; a bad
//                              value fails the submission with the plugin's messages
//   slurm_spank_user_init      slurmstepd only: exports BELLOWS_ELASTIC_* into the job
// No exception leaves this file: every callback catches and answers -1 (failure).

// spank.h declares the slurm_spank_* callbacks without a C linkage block of their own.
extern "C" {
#include <slurm/spank.h>
}

#include <array>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "bellows/spank/options.hpp"

#define BELLOWS_SPANK_EXPORT __attribute__((visibility("default")))

// What the Slurm plugin loader looks for (SPANK_PLUGIN(bellows, 1), spelled out so that the
// constants get C linkage from C++).
extern "C" BELLOWS_SPANK_EXPORT const char plugin_name[] = "bellows";
extern "C" BELLOWS_SPANK_EXPORT const char plugin_type[] = "spank";
extern "C" BELLOWS_SPANK_EXPORT const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern "C" BELLOWS_SPANK_EXPORT const unsigned int spank_plugin_version = 1;

namespace {

using bellows::spank::OptionSpec;
using bellows::spank::OptionValues;

// The option values and the environment computed from them, in this process (sbatch, srun
// or one slurmstepd). SPANK's option callbacks receive no context pointer, so this single
// instance is the only state the plugin keeps.
struct PluginState {
  OptionValues values;
  std::vector<bellows::spank::EnvVar> environment;
};

PluginState& plugin_state() {
  static PluginState state;
  return state;
}

// SPANK treats a negative answer as failure (ESPANK_* codes are positive and would pass:
// sbatch goes on and submits the job).
constexpr int failed = -1;

enum OptionId : int { elastic_id = 1, elastic_policy_id = 2 };

int remember_option(int id, const char* optarg, int /*remote*/) noexcept {
  try {
    std::string value = optarg != nullptr ? optarg : "";
    OptionValues& values = plugin_state().values;
    (id == elastic_id ? values.elastic : values.elastic_policy) = std::move(value);
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    slurm_error("spank_bellows: %s", error.what());
    return failed;
  }
}

spank_option make_option(const OptionSpec& spec, int id) {
  // The literals behind the specs live as long as the plugin; Slurm does not write to them.
  return {const_cast<char*>(spec.name.data()), const_cast<char*>(spec.arginfo.data()),
          const_cast<char*>(spec.usage.data()), 1, id, remember_option};
}

// Slurm keeps pointers to the registered options, so the table outlives every callback.
std::array<spank_option, 2>& option_table() {
  static std::array<spank_option, 2> table{make_option(bellows::spank::elastic_option, elastic_id),
                                           make_option(bellows::spank::elastic_policy_option,
                                                       elastic_policy_id)};
  return table;
}

// Where a relative --elastic-policy=FILE is read from: the directory the job was submitted
// from. sbatch and salloc submit a new job from their working directory. slurmstepd gets the
// job's SLURM_SUBMIT_DIR; so does srun inside a job, which inherits the job's options (its
// working directory may be the job's --chdir); a srun that creates a job uses its own.
std::filesystem::path submission_dir(spank_t sp) {
  if (spank_remote(sp) == 1) {
    std::array<char, 4096> buffer{};
    if (spank_getenv(sp, "SLURM_SUBMIT_DIR", buffer.data(), static_cast<int>(buffer.size())) ==
        ESPANK_SUCCESS) {
      return buffer.data();
    }
  } else if (spank_context() == S_CTX_LOCAL && std::getenv("SLURM_JOB_ID") != nullptr) {
    if (const char* dir = std::getenv("SLURM_SUBMIT_DIR"); dir != nullptr && *dir != '\0') {
      return dir;
    }
  }
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  return ec ? std::filesystem::path("/") : cwd;
}

}  // namespace

extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_init(spank_t sp, int /*ac*/, char** /*av*/) {
  switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
    case S_CTX_ALLOCATOR:
      break;
    default:
      return ESPANK_SUCCESS;  // slurmd, prolog/epilog: no options there
  }
  try {
    for (spank_option& option : option_table()) {
      const spank_err_t rc = spank_option_register(sp, &option);
      if (rc != ESPANK_SUCCESS) {
        slurm_error("spank_bellows: cannot register --%s: %s", option.name, spank_strerror(rc));
        return failed;
      }
    }
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    slurm_error("spank_bellows: %s", error.what());
    return failed;
  }
}

extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_init_post_opt(spank_t sp, int /*ac*/,
                                                              char** /*av*/) {
  try {
    PluginState& state = plugin_state();
    if (!state.values.any()) return ESPANK_SUCCESS;
    bellows::spank::Validation result = bellows::spank::validate(state.values, submission_dir(sp));
    if (!result.ok()) {
      for (const std::string& line : result.errors) slurm_error("%s", line.c_str());
      return failed;
    }
    state.environment = std::move(result.environment);
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    slurm_error("spank_bellows: %s", error.what());
    return failed;
  }
}

extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_user_init(spank_t sp, int /*ac*/, char** /*av*/) {
  try {
    for (const bellows::spank::EnvVar& var : plugin_state().environment) {
      const spank_err_t rc = spank_setenv(sp, var.name.c_str(), var.value.c_str(), 1);
      if (rc != ESPANK_SUCCESS) {
        slurm_error("spank_bellows: cannot set %s in the job's environment: %s", var.name.c_str(),
                    spank_strerror(rc));
        return failed;
      }
    }
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    slurm_error("spank_bellows: %s", error.what());
    return failed;
  }
}
