// nala_testtool: lets the Python oracle tests (tests/python) call the C++ readers and writers on
// files made by independent implementations (numpy, safetensors, Pillow, torch). Not installed;
// not for users.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "diffusion/datasets.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/safetensors.h"

using namespace nala;

namespace {

int usage() {
  std::cerr << "usage: nala_testtool <npz-copy IN OUT [compress] | npz-stream-copy IN KEY ROWS OUT | safetensors-copy IN OUT |\n"
               "                      image-decode IN OUT.npz | center-crop IN SIZE OUT.npz |\n"
               "                      pil-resize IN.npz W H box|bilinear|bicubic OUT.npz | fmnist DIR SPLIT OUT.npz>\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> a(argv + 2, argv + argc);
  try {
    if (cmd == "npz-copy" && a.size() >= 2) {
      io::save_npz(a[1], io::load_npz(a[0]), a.size() > 2 && a[2] == "compress");
    } else if (cmd == "npz-stream-copy" && a.size() == 4) {
      io::NpzArrayReader r(a[0], a[1]);
      io::NpzWriter w(a[3], false);
      w.begin(a[1], r.dtype(), r.shape());
      while (r.rows_left() > 0) w.append(r.read_rows(std::stoll(a[2])));
      w.close();
    } else if (cmd == "safetensors-copy" && a.size() == 2) {
      std::map<std::string, std::string> meta;
      auto t = io::load_safetensors(a[0], &meta);
      io::save_safetensors(a[1], t, meta);
    } else if (cmd == "image-decode" && a.size() == 2) {
      io::save_npz(a[1], {{"arr_0", io::read_image(a[0])}});
    } else if (cmd == "center-crop" && a.size() == 3) {
      io::save_npz(a[2], {{"arr_0", io::center_crop_adm(io::read_image(a[0]), std::stoll(a[1]))}});
    } else if (cmd == "pil-resize" && a.size() == 5) {
      auto in = io::load_npz(a[0]).at(0).second;
      const std::string f = a[3];
      io::ResampleFilter filt = f == "box" ? io::ResampleFilter::Box : f == "bilinear" ? io::ResampleFilter::Bilinear : io::ResampleFilter::Bicubic;
      io::save_npz(a[4], {{"arr_0", io::pil_resize(in, std::stoll(a[1]), std::stoll(a[2]), filt)}});
    } else if (cmd == "fmnist" && a.size() == 3) {
      auto d = data::read_fashion_mnist(a[0], a[1]);
      io::save_npz(a[2], {{"images", d.images}, {"labels", d.labels}});
    } else {
      return usage();
    }
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
