// spank_bellows.so: the SPANK plugin that adds --elastic=MIN:MAX and --elastic-policy=FILE to
// sbatch, salloc and srun (and #SBATCH directives). A thin extern "C" shim over
// bellows::spank (options.hpp), which does all the checking and is tested without Slurm.
//
// Where each SPANK callback runs (slurm/spank.h has the full call order):
//   slurm_spank_init           sbatch/salloc/srun and slurmstepd: registers both options;
//                              in a command that submits a job with --elastic on its
//                              command line, asks for Slurm's no-kill (options.hpp,
//                              NoKillVariable), as the option callback does for #SBATCH
//   slurm_spank_init_post_opt  the same, once the options are read: validates them. At
//                              submission a bad value fails the submission with the
//                              plugin's messages, and the policy file's content is put in
//                              the job's SPANK environment (SLURM_SPANK_BELLOWS_ELASTIC_*),
//                              which carries it to the nodes. In slurmstepd it checks that
//                              content and reads no file.
//   slurm_spank_user_init      slurmstepd only: exports BELLOWS_ELASTIC_* into the job
//   slurm_spank_task_init      slurmstepd, in each task before exec: a job the plugin could
//                              not set up on this node ends here, its reasons on the task's
//                              stderr (the job's output), status 1
// In slurmstepd (remote context) no callback answers failure for the job's options: Slurm
// drains the node when slurm_spank_init, slurm_spank_init_post_opt or slurm_spank_user_init
// fails in a batch step ("Plugin initialization failed", then "batch job complete failure"),
// and a user's mistake must not cost a node. Only slurm_spank_task_init fails, which ends the
// task alone. No exception leaves this file: every callback catches it.

// spank.h declares the slurm_spank_* callbacks without a C linkage block of their own.
extern "C" {
#include <slurm/spank.h>
}

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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
  /// In slurmstepd: why this node cannot run the job as submitted, one line each; told to
  /// each task on its stderr by slurm_spank_task_init, which then fails the task.
  std::vector<std::string> job_errors;
};

PluginState& plugin_state() {
  static PluginState state;
  return state;
}

// SPANK treats a negative answer as failure (ESPANK_* codes are positive and would pass:
// sbatch goes on and submits the job).
constexpr int failed = -1;

// The job's SPANK environment (spank_job_control_setenv) reaches the job's processes with
// this prefix: sbatch and salloc export it so, and srun inside the job passes it on.
constexpr std::string_view spank_env_prefix = "SLURM_SPANK_";

/// This host's name, for the messages a job reads.
std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "this node";
  return name.data();
}

/// Records a reason the job cannot run here (slurmstepd): in slurmd's log for the site, and
/// for the job's tasks to print.
void refuse_in_job(const std::string& why) {
  slurm_error("spank_bellows: %s", why.c_str());
  plugin_state().job_errors.push_back(why);
}

/// The policy that travelled with the job, from the job's environment (slurmstepd).
std::optional<bellows::spank::SubmittedPolicy> submitted_policy_of_job(spank_t sp) {
  char** env = nullptr;
  if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || env == nullptr) return std::nullopt;
  return bellows::spank::submitted_policy([env](std::string_view name) -> std::optional<std::string> {
    const std::string key = std::string(spank_env_prefix) + std::string(name) + "=";
    for (char** entry = env; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, key.c_str(), key.size()) == 0) return std::string(*entry + key.size());
    }
    return std::nullopt;
  });
}

/// The policy of the job this srun runs in, from its environment; none outside a job.
std::optional<bellows::spank::SubmittedPolicy> submitted_policy_of_this_process() {
  if (spank_context() != S_CTX_LOCAL || std::getenv("SLURM_JOB_ID") == nullptr) return std::nullopt;
  return bellows::spank::submitted_policy([](std::string_view name) -> std::optional<std::string> {
    const std::string key = std::string(spank_env_prefix) + std::string(name);
    const char* value = std::getenv(key.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

/// At submission: puts the policy's path and content in the job's SPANK environment (the
/// prolog and epilog see it as SPANK_NAME, the job's processes as SLURM_SPANK_NAME) and in
/// this process's environment as SLURM_SPANK_NAME, which srun passes to the steps it starts.
bool send_policy_with_job(spank_t sp, const std::vector<bellows::spank::EnvVar>& environment) {
  for (const bellows::spank::EnvVar& var : environment) {
    if (var.name != bellows::spank::env_policy && var.name != bellows::spank::env_policy_content)
      continue;
    const spank_err_t rc = spank_job_control_setenv(sp, var.name.c_str(), var.value.c_str(), 1);
    if (rc != ESPANK_SUCCESS) {
      slurm_error("spank_bellows: cannot put %s in the job's environment: %s", var.name.c_str(),
                  spank_strerror(rc));
      return false;
    }
    const std::string name = std::string(spank_env_prefix) + var.name;
    if (::setenv(name.c_str(), var.value.c_str(), 1) != 0) {
      slurm_error("spank_bellows: cannot set %s: %s", name.c_str(), std::strerror(errno));
      return false;
    }
  }
  return true;
}

/// True in a command that submits a job: sbatch or salloc, or a srun outside a job.
bool submits_a_job() {
  const spank_context_t context = spank_context();
  return context == S_CTX_ALLOCATOR || (context == S_CTX_LOCAL && std::getenv("SLURM_JOB_ID") == nullptr);
}

/// This process's command line, argv[0] first (/proc/self/cmdline); empty when unreadable.
std::vector<std::string> own_command_line() {
  std::vector<std::string> arguments;
  std::FILE* file = std::fopen("/proc/self/cmdline", "rb");
  if (file == nullptr) return arguments;
  std::string current;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) {
    if (c == '\0') {
      arguments.push_back(std::move(current));
      current.clear();
    } else {
      current.push_back(static_cast<char>(c));
    }
  }
  std::fclose(file);
  return arguments;
}

/// Makes the job this command submits run with Slurm's no-kill (options.hpp, NoKillVariable):
/// sets the command's own variable, which it reads as --no-kill, unless it is set already.
void ask_for_no_kill(const std::vector<std::string>& command_line) {
  if (command_line.empty()) return;
  const auto variable = bellows::spank::no_kill_variable(command_line.front());
  if (!variable) return;
  const std::string name(variable->name);
  if (::setenv(name.c_str(), std::string(bellows::spank::NoKillVariable::value).c_str(), 0) != 0) {
    slurm_error("spank_bellows: cannot set %s: %s", name.c_str(), std::strerror(errno));
  }
}

enum OptionId : int { elastic_id = 1, elastic_policy_id = 2 };

int remember_option(int id, const char* optarg, int /*remote*/) noexcept {
  try {
    std::string value = optarg != nullptr ? optarg : "";
    OptionValues& values = plugin_state().values;
    (id == elastic_id ? values.elastic : values.elastic_policy) = std::move(value);
    // From an #SBATCH directive this comes before the environment is read; from the command
    // line it is too late, and slurm_spank_init saw it there already.
    if (submits_a_job()) ask_for_no_kill(own_command_line());
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
  const bool in_job = spank_remote(sp) == 1;
  try {
    // Before the command reads its environment: an elastic job runs with no-kill.
    if (submits_a_job()) {
      const std::vector<std::string> command_line = own_command_line();
      if (bellows::spank::elastic_on_command_line(command_line)) ask_for_no_kill(command_line);
    }
    for (spank_option& option : option_table()) {
      const spank_err_t rc = spank_option_register(sp, &option);
      if (rc != ESPANK_SUCCESS) {
        const std::string why = "cannot register --" + std::string(option.name) + ": " + spank_strerror(rc);
        if (!in_job) {
          slurm_error("spank_bellows: %s", why.c_str());
          return failed;
        }
        refuse_in_job(why);
      }
    }
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    if (!in_job) {
      slurm_error("spank_bellows: %s", error.what());
      return failed;
    }
    refuse_in_job(error.what());
    return ESPANK_SUCCESS;
  }
}

extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_init_post_opt(spank_t sp, int /*ac*/,
                                                              char** /*av*/) {
  const bool in_job = spank_remote(sp) == 1;
  try {
    PluginState& state = plugin_state();
    if (!state.values.any()) return ESPANK_SUCCESS;
    if (in_job) {
      // The content checked at submission, never a file: the node may not see it.
      bellows::spank::Validation result =
          bellows::spank::validate(state.values, submission_dir(sp), submitted_policy_of_job(sp),
                                   bellows::spank::PolicyFileAccess::submitted_only);
      for (const std::string& line : result.errors) refuse_in_job(line);
      state.environment = std::move(result.environment);
      return ESPANK_SUCCESS;
    }
    bellows::spank::Validation result =
        bellows::spank::validate(state.values, submission_dir(sp), submitted_policy_of_this_process());
    if (!result.ok()) {
      for (const std::string& line : result.errors) slurm_error("%s", line.c_str());
      return failed;
    }
    if (!send_policy_with_job(sp, result.environment)) return failed;
    state.environment = std::move(result.environment);
    return ESPANK_SUCCESS;
  } catch (const std::exception& error) {
    if (in_job) {
      refuse_in_job(error.what());
      return ESPANK_SUCCESS;
    }
    slurm_error("spank_bellows: %s", error.what());
    return failed;
  }
}

// slurmstepd only. A variable that cannot be set is a reason for the job's tasks to end, not
// a failure of the plugin stack (which would drain the node).
extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_user_init(spank_t sp, int /*ac*/, char** /*av*/) {
  try {
    for (const bellows::spank::EnvVar& var : plugin_state().environment) {
      const spank_err_t rc = spank_setenv(sp, var.name.c_str(), var.value.c_str(), 1);
      if (rc != ESPANK_SUCCESS) {
        refuse_in_job("cannot set " + var.name + " in the job's environment: " + spank_strerror(rc));
      }
    }
  } catch (const std::exception& error) {
    refuse_in_job(error.what());
  }
  return ESPANK_SUCCESS;
}

// slurmstepd, in each task after its stdout and stderr lead to the job's output and before
// it executes: a job the plugin could not set up here says why there and ends with status 1.
extern "C" BELLOWS_SPANK_EXPORT int slurm_spank_task_init(spank_t sp, int /*ac*/, char** /*av*/) {
  try {
    const std::vector<std::string>& errors = plugin_state().job_errors;
    if (errors.empty()) return ESPANK_SUCCESS;
    std::uint32_t job = 0;
    const bool known = spank_get_item(sp, S_JOB_ID, &job) == ESPANK_SUCCESS;
    std::string text;
    for (const std::string& line : errors) text += "spank_bellows: error: " + line + "\n";
    text += "spank_bellows: error: job " + (known ? std::to_string(job) : std::string("?")) + " cannot run on " +
            host_name() + " as submitted: its task ends with status 1 (the node stays in service)\n";
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  } catch (const std::exception&) {
    // Nothing more can be said; the task still ends.
  }
  return failed;
}
