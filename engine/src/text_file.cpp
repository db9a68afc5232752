#include "text_file.h"

#include <fstream>
#include <sstream>

#include "kev/error.h"

namespace kev {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::Io, path + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(ErrorCode::Io, path + ": read error");
    return ss.str();
}

}  // namespace kev
