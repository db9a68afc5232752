// What the main window's two source files share: settings keys and toolbar rows.
#pragma once

namespace kevui::window {

constexpr int kMaxRecentModels = 8;
// Rows of the precision combo.
constexpr int kPrecision4Bit = 0;
constexpr int kPrecisionHalf = 1;
constexpr int kPrecisionF32 = 2;
constexpr int kPrecisionAuto = 3;  // the default: what is fastest on this CPU for the file

// QSettings keys.
constexpr const char* kSettingLastModel = "model/last";
constexpr const char* kSettingRecent = "model/recent";
constexpr const char* kSettingPrecision = "model/precision";
constexpr const char* kSettingDevice = "model/device";
constexpr const char* kSettingLoraPath = "lora/path";
constexpr const char* kSettingLoraOn = "lora/on";
constexpr const char* kSettingLoraScale = "lora/scale";
constexpr const char* kSettingMarkdown = "view/markdown";
constexpr const char* kSettingGeometry = "window/geometry";
constexpr const char* kSettingState = "window/state";

}  // namespace kevui::window
