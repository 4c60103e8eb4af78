// Manifests of resumable outputs (FID-batch parts, latent shards): every setting that changes their
// content, written when an output starts and compared when it resumes, so a rerun with another
// seed, model, sampler, batch size, ... never mixes old and new results: it is refused with the
// settings that differ.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace nala::io {

using Settings = std::map<std::string, std::string>;

// "crc32:<8 hex digits> bytes:<size>" of a file's content (zlib's CRC-32): tells two weights files apart.
std::string file_fingerprint(const std::string& path);

// dir/manifest.json: written (atomically) when absent and `resuming` is false; compared otherwise.
// Throws naming `what`, the manifest and each differing setting ("seed: 0 before, 1 now"). If outputs
// exist (resuming) but the manifest does not (an older nala), the resume is refused as well.
void check_or_write_manifest(const std::string& dir, const Settings& settings, bool resuming, const std::string& what);

}  // namespace nala::io
