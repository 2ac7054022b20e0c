// The progress bar gpucompute-loadtest draws on stderr (--progress): the
// row being measured, how far it is, and the last window's figures.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "loadtest/load.h"

namespace gpucompute::loadtest {

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}

  // Row `row` of `rows` (0-based), `what` it runs, `elapsed` of at most
  // `limit`; `last` is the window just measured, if any.
  void Show(int row, int rows, const std::string& what, absl::Duration elapsed,
            absl::Duration limit, int windows, const WindowStats* last);
  // Erases the bar, so that the row's line is printed in its place.
  void Clear();

 private:
  bool enabled_;
};

}  // namespace gpucompute::loadtest
