// Deep-learning wiring of a task (see dl_hooks.h). Not yet implemented beyond the seams: issue 5.
#include "dl_hooks.h"

namespace slipway::spank {

launcher::Status prepare_dl_node(spank_t, const PluginState&, launcher::LaunchSpec&) {
  return launcher::Status();
}

launcher::Status prepare_dl_task(spank_t, const PluginState&, launcher::TaskView&) {
  return launcher::Status();
}

}  // namespace slipway::spank
