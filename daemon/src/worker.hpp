#pragma once
// One thread that runs posted jobs in order: the daemon's own thread for everything that
// must not run on PMIx's progress thread.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace bellows::daemon {

/// Thread safety: post() and stop() may be called from any thread.
class Worker {
 public:
  Worker() : thread_([this] { run(); }) {}
  ~Worker() { stop(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Queues job; false (job dropped) once stop() was called.
  bool post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return false;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

  /// Runs the jobs already queued, then ends the thread. Not from the worker itself.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  [[nodiscard]] bool on_worker_thread() const noexcept {
    return std::this_thread::get_id() == thread_.get_id();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bellows::daemon
