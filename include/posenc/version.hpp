#pragma once
/// \file
/// The version string printed by `posenc --version` (set by CMake from project()).

#ifndef POSENC_VERSION
/// "X.Y.Z", the project version (CMake defines it for the library and its users).
#define POSENC_VERSION "0.1.0"
#endif
