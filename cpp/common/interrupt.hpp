// Stopping long native loops early (Ctrl-C). The thread that started the work calls poll() between pieces
// of it; at most every kInterval that runs `check`, which throws to stop the work (the bindings' takes the
// GIL and runs Python's pending signal handlers). Before the exception leaves poll() it raises the flag that
// worker threads read with stopped(), so they end their share and can be joined.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <utility>

namespace fastmmeval {

class Interrupt {
 public:
  static constexpr std::chrono::milliseconds kInterval{100};

  Interrupt() = default;  // never stops
  explicit Interrupt(std::function<void()> check) : check_(std::move(check)) {}
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // On the thread that started the work only. Reads the clock: call it every ~10 us of work or less often.
  void poll() {
    if (!check_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    next_ = now + kInterval;
    try {
      check_();
    } catch (...) {
      stopped_.store(true, std::memory_order_relaxed);
      throw;
    }
  }

  // On any thread: whether poll() has thrown.
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }

 private:
  std::function<void()> check_;
  std::chrono::steady_clock::time_point next_ = std::chrono::steady_clock::now() + kInterval;
  std::atomic<bool> stopped_{false};
};

}  // namespace fastmmeval
