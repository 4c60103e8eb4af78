// nala eval: FID, sFID, IS, precision and recall of a sample .npz against a reference .npz, as the
// ADM evaluator computes them; --save-stats for reference batches; the Fashion-MNIST counterparts
// (FD-FMNIST with nala's own classifier) for the built-in demo; and the classifier's training.
#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parse.h"
#include "data/datasets.h"
#include "io/atomic_file.h"
#include "metrics/evaluator.h"
#include "metrics/fmnist_classifier.h"
#include "metrics/inception.h"

namespace nala::cli {

int run_eval(int argc, char** argv) {
  cxxopts::Options o("nala eval", "Sample quality metrics: FID, sFID, IS, precision, recall (ADM evaluator), or FD-FMNIST");
  o.add_options()("ref", "reference .npz (arr_0 images, optionally mu/sigma/mu_s/sigma_s)", cxxopts::value<std::string>())(
      "sample", "sample .npz (arr_0 uint8 NHWC, arr_1 labels)", cxxopts::value<std::string>())(
      "inception", "pt_inception-2015-12-05 weights as safetensors (scripts/convert_inception.py)", cxxopts::value<std::string>())(
      "json", "also write the metrics as JSON here", cxxopts::value<std::string>())(
      "save-stats", "compute the statistics of this batch and write it in the reference layout to --out", cxxopts::value<std::string>())(
      "out", "output .npz for --save-stats, or the classifier for --train-fmnist-classifier", cxxopts::value<std::string>())(
      "fmnist", "evaluate --sample against Fashion-MNIST's test split with --classifier (FD-FMNIST etc.)")(
      "classifier", "nala's Fashion-MNIST classifier (safetensors)", cxxopts::value<std::string>())(
      "ref-cache", "with --fmnist: keep the test split's classifier features in this file and reuse them (recomputed when the classifier, image size or device differs)",
      cxxopts::value<std::string>())(
      "train-fmnist-classifier", "train the Fashion-MNIST classifier and write it to --out")(
      "epochs", "classifier epochs", cxxopts::value<int64_t>()->default_value("4"))("seed", "classifier seed", cxxopts::value<uint64_t>()->default_value("0"))(
      "batch-size", "Inception batch", cxxopts::value<int64_t>()->default_value("250"))(
      "allow-few-samples", "compute distances even with fewer images than feature dimensions")(
      "allow-size-mismatch", "compare batches of different image sizes")(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  metrics::EvalOptions eo;
  eo.device = pick_device(a["device"].as<std::string>());
  eo.batch = a["batch-size"].as<int64_t>();
  if (eo.batch <= 0) throw std::runtime_error("--batch-size must be positive, got " + std::to_string(eo.batch));
  if (a.count("json")) io::check_parent_dir(a["json"].as<std::string>(), "--json");
  if (a.count("out")) io::check_parent_dir(a["out"].as<std::string>(), "--out");
  eo.allow_few_samples = a.count("allow-few-samples") > 0;
  eo.allow_size_mismatch = a.count("allow-size-mismatch") > 0;
  if (a.count("ref-cache")) {
    if (!a.count("fmnist")) throw std::runtime_error("--ref-cache is for --fmnist evaluations only");
    eo.fmnist_ref_cache = a["ref-cache"].as<std::string>();
    io::check_parent_dir(eo.fmnist_ref_cache, "--ref-cache");
  }
  nlohmann::ordered_json j;

  if (a.count("train-fmnist-classifier")) {
    if (!a.count("out")) throw std::runtime_error("--train-fmnist-classifier needs --out FILE.safetensors");
    if (a["epochs"].as<int64_t>() < 1) throw std::runtime_error("--epochs must be at least 1, got " + std::to_string(a["epochs"].as<int64_t>()));
    auto r = metrics::train_fmnist_classifier(data::default_fashion_mnist_dir(), a["out"].as<std::string>(), a["epochs"].as<int64_t>(),
                                              a["seed"].as<uint64_t>(), eo.device);
    std::printf("Fashion-MNIST classifier: test accuracy %.4f (%.0f s) -> %s\n", r.test_accuracy, r.seconds, a["out"].as<std::string>().c_str());
    return 0;
  }
  if (a.count("fmnist")) {
    if (!a.count("sample") || !a.count("classifier")) throw std::runtime_error("--fmnist needs --sample and --classifier");
    auto net = metrics::load_fmnist_classifier(a["classifier"].as<std::string>());
    auto m = metrics::evaluate_fmnist(*net, a["sample"].as<std::string>(), data::default_fashion_mnist_dir(), eo);
    std::printf("| metric | value |\n|---|---|\n| FD-FMNIST | %.4f |\n| precision-FMNIST | %.4f |\n| recall-FMNIST | %.4f |\n| IS-FMNIST | %.4f |\n",
                m.fd, m.precision, m.recall, m.class_is);
    if (m.class_accuracy >= 0) std::printf("| class accuracy | %.4f |\n", m.class_accuracy);
    std::printf("(%ld samples vs %ld Fashion-MNIST test images)\n", m.samples, m.references);
    j = {{"fd_fmnist", m.fd}, {"precision_fmnist", m.precision}, {"recall_fmnist", m.recall}, {"is_fmnist", m.class_is},
         {"class_accuracy", m.class_accuracy}, {"samples", m.samples}, {"references", m.references}};
  } else {
    if (!a.count("inception")) throw std::runtime_error("nala eval needs --inception WEIGHTS.safetensors (see the README: scripts/convert_inception.py)");
    auto net = metrics::load_inception(a["inception"].as<std::string>());
    net->to(eo.device);
    if (a.count("save-stats")) {
      if (!a.count("out")) throw std::runtime_error("--save-stats needs --out OUT.npz");
      metrics::save_reference_stats(*net, a["save-stats"].as<std::string>(), a["out"].as<std::string>(), eo);
      std::cout << "wrote " << a["out"].as<std::string>() << " (arr_0, mu, sigma, mu_s, sigma_s)\n";
      return 0;
    }
    if (!a.count("ref") || !a.count("sample")) throw std::runtime_error("nala eval needs --ref REF.npz and --sample SAMPLE.npz");
    auto m = metrics::evaluate_inception(*net, a["ref"].as<std::string>(), a["sample"].as<std::string>(), eo);
    std::printf("| metric | value |\n|---|---|\n| FID | %.4f |\n| sFID | %.4f |\n| Inception Score | %.4f |\n| Precision | %.4f |\n| Recall | %.4f |\n",
                m.fid, m.sfid, m.inception_score, m.precision, m.recall);
    std::printf("(%ld samples, %ld reference images%s; %.0f img/s)\n", m.samples, m.references,
                m.reference_stats_from_file ? ", reference statistics from the file" : "", m.images_per_second);
    j = {{"fid", m.fid}, {"sfid", m.sfid}, {"is", m.inception_score}, {"precision", m.precision}, {"recall", m.recall},
         {"samples", m.samples}, {"references", m.references}, {"images_per_second", m.images_per_second}};
  }
  if (a.count("json")) io::write_file_atomic(a["json"].as<std::string>(), [&](std::ostream& os) { os << j.dump(2) << "\n"; });
  return 0;
}

}  // namespace nala::cli
