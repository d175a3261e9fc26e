#pragma once
/// \file
/// The version string printed by `posenc --version` (set by CMake from project()).

#ifndef POSENC_VERSION
#define POSENC_VERSION "0.1.0"
#endif
