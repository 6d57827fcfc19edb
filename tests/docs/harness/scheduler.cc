// Harness of docs/training.md's scheduler fragment: an optimizer `opt`; after one schedule step the
// warm-up's learning rate must have moved on from its start.
#include "tiny.h"

int doc_run() {
  auto opt = kiln::optim::SgdConfig().init();
  //@fragment
  return opt.lr() > 0 && schedule.current() != opt.lr() ? 0 : 1;
}
