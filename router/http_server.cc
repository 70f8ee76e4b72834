#include "router/http_server.h"

#include <malloc.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "router/internal/http_connection.h"
#include "router/internal/http_handlers.h"

namespace tandem::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  Impl(Router& router, base::MetricsRegistry& metrics, const ApiKeys& api_keys,
       std::function<absl::Status()> liveness)
      : ctx(router, metrics, api_keys, std::move(liveness)),
        work(net::make_work_guard(ioc)),
        acceptor(ioc),
        accept_retry(ioc),
        prepare(router.config().limits.prepare_threads,
                static_cast<size_t>(router.config().limits.max_inflight)) {
    ctx.prepare = &prepare;
  }

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec,
                                                        tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) {
        return;
      }
      if (ec) {
        // EMFILE and the like: back off instead of spinning on the error.
        LOG_EVERY_N(WARNING, 100) << "router HTTP: accept failed: " << ec.message();
        accept_retry.expires_after(std::chrono::milliseconds(50));
        accept_retry.async_wait([this](boost::system::error_code wait_ec) {
          if (!wait_ec) {
            Accept();
          }
        });
        return;
      }
      boost::system::error_code opt_ec;
      socket.set_option(tcp::no_delay(true), opt_ec);  // SSE chunks go out at once
      const auto strand = socket.get_executor();
      auto conn = std::make_shared<internal::HttpConnection>(std::move(socket), ctx);
      const bool busy = ctx.connections.load(std::memory_order_relaxed) >
                        ctx.router.config().limits.max_connections;
      // From here on the connection runs on its strand only.
      net::post(strand, [conn, busy] { busy ? conn->RejectBusy() : conn->Run(); });
      Accept();
    });
  }

  // Declared first: destroyed last, after every connection referring to it.
  internal::HttpContext ctx;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  std::vector<std::thread> threads;
  // The generations' Prepare + Start, off the I/O threads. Last: joined
  // first (running what is queued), while the strands it posts to live.
  base::Executor prepare;
};

HttpServer::HttpServer(Router& router, base::MetricsRegistry& metrics, const ApiKeys& api_keys,
                       std::function<absl::Status()> liveness)
    : router_(router),
      impl_(std::make_unique<Impl>(router, metrics, api_keys, std::move(liveness))) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http_address '", address,
                                                   "' is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const RouterConfig& cfg = router_.config();
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  const tcp::resolver::results_type found =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || found.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", address, ": ",
                                               ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  tcp::acceptor& acceptor = impl_->acceptor;
  if (acceptor.open(endpoint.protocol(), ec);
      !ec && (acceptor.set_option(net::socket_base::reuse_address(true), ec), !ec) &&
      (acceptor.bind(endpoint, ec), !ec)) {
    acceptor.listen(cfg.http_backlog, ec);
  }
  if (ec) {
    acceptor.close(ec);
    return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", address, ": ",
                                               ec.message()));
  }
  port_ = acceptor.local_endpoint().port();
  static std::once_flag malloc_tuned;
  std::call_once(malloc_tuned, [] {
    // Request bodies (up to limits.max_body_bytes) and their parsed copies
    // are the router's largest allocations. By default glibc raises its mmap
    // threshold to 32 MiB after the first large free, and with it the trim
    // threshold to 64 MiB: a thread arena then keeps a few large requests'
    // worth of memory for good (measured: 18 -> 60 MiB RSS after one 32 MB
    // prompt). A fixed 1 MiB threshold maps such blocks and unmaps them on
    // free.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
  });
  impl_->Accept();
  const int threads = cfg.http_threads > 0 ? cfg.http_threads : 2;
  for (int i = 0; i < threads; ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (impl_ == nullptr || impl_->threads.empty()) {
    return;
  }
  // Requests still running post their events to connection strands: let
  // them finish (Router::Shutdown has ended them in a normal shutdown).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (impl_->ctx.unfinished_requests.load(std::memory_order_acquire) > 0 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (const int left = impl_->ctx.unfinished_requests.load(std::memory_order_acquire); left > 0) {
    LOG(ERROR) << "router HTTP: stopping with " << left << " requests still running";
  }
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) {
    t.join();
  }
  impl_->threads.clear();
  // Closes the listener and, with the pending handlers, every connection.
  impl_.reset();
}

}  // namespace tandem::router
