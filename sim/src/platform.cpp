#include "bellows/sim/platform.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace bellows::sim {

std::string format_number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

std::string validate(const PlatformOptions& o) {
  if (!(o.gflops > 0.0) || !std::isfinite(o.gflops)) return "--gflops must be positive, got " + format_number(o.gflops);
  if (o.lanes < 1) return "--lanes must be at least 1, got " + std::to_string(o.lanes);
  if (!(o.latency_us >= 0.0) || !std::isfinite(o.latency_us)) {
    return "--latency-us must be at least 0, got " + format_number(o.latency_us);
  }
  if (!(o.bandwidth_gbps > 0.0) || !std::isfinite(o.bandwidth_gbps)) {
    return "--bandwidth-gbps must be positive, got " + format_number(o.bandwidth_gbps);
  }
  if (!(o.backbone_gbps >= 0.0) || !std::isfinite(o.backbone_gbps)) {
    return "--backbone-gbps must be at least 0, got " + format_number(o.backbone_gbps);
  }
  return {};
}

std::string host_name(int node) { return "node-" + std::to_string(node); }

std::string platform_xml(const PlatformOptions& o, int nodes) {
  const double link_bps = o.bandwidth_gbps * 1e9;
  // Without a backbone the switch is non-blocking: a flow shares only the sender's up
  // link and the receiver's down link (and SimGrid solves small independent systems).
  const std::string backbone = o.backbone_gbps > 0.0
                                   ? " bb_bw=\"" + format_number(o.backbone_gbps * 1e9) + "Bps\" bb_lat=\"0us\""
                                   : std::string();
  std::string xml;
  xml += "<?xml version='1.0'?>\n";
  xml += "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n";
  xml += "<!-- Bellows simulated machine: " + std::to_string(nodes) + " nodes of " + format_number(o.gflops) +
         " GFLOP/s x " + std::to_string(o.lanes) + " lanes; " + format_number(o.latency_us) + " us one way, " +
         format_number(o.bandwidth_gbps) + " GB/s per node link -->\n";
  xml += "<platform version=\"4.1\">\n";
  xml += "  <cluster id=\"bellows\" prefix=\"node-\" suffix=\"\" radical=\"0-" + std::to_string(nodes - 1) +
         "\" speed=\"" + format_number(o.gflops * 1e9) + "f\" core=\"" + std::to_string(o.lanes) + "\" bw=\"" +
         format_number(link_bps) + "Bps\" lat=\"" + format_number(o.latency_us / 2.0) + "us\"" + backbone +
         " sharing_policy=\"SPLITDUPLEX\"/>\n";
  xml += "</platform>\n";
  return xml;
}

std::string write_platform(const PlatformOptions& options, int nodes, const std::string& path) {
  std::string written = path;
  if (written.empty()) {
    char name[] = "/tmp/bellows-sim-platform-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) throw std::runtime_error("cannot create a temporary platform file in /tmp");
    close(fd);
    written = name;
  }
  std::ofstream out(written);
  out << platform_xml(options, nodes);
  if (!out) throw std::runtime_error("cannot write the platform file " + written);
  return written;
}

std::vector<std::string> simgrid_arguments(const std::string& program) {
  return {program, "--log=root.thresh:warning", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"};
}

}  // namespace bellows::sim
