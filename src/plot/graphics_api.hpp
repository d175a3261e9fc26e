#pragma once
// PLplot and cairo, loaded when the first image is drawn rather than linked: together
// they pull in some twenty shared libraries (pango, fontconfig, X11, ...), and every
// posenc command would pay for loading them at start-up.
//
// Each entry of the lists below becomes a member of GraphicsApi with the function's own
// type. plplot.h names its functions c_plxxx and #defines plxxx to them, so a call
// written `gfx().plbox(...)` reaches the member c_plbox.

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <plplot.h>

#define POSENC_PLPLOT_FUNCTIONS(X)                                                             \
  X(c_plsdev) X(c_plspage) X(c_plssub) X(c_plscmap0) X(c_plscmap1) X(c_plinit) X(pl_cmd)       \
  X(c_pladv) X(c_plvpor) X(c_plwind) X(c_plcol0) X(c_plfill) X(c_plimagefr) X(c_plbox)         \
  X(c_pllab) X(c_plmtex) X(c_plschr) X(c_plcolorbar) X(c_plline) X(c_plstring) X(c_pllsty)     \
  X(c_plwidth) X(c_plptex) X(c_pllegend) X(c_plend) X(plsexit) X(plsabort) X(plgDevs)     \
  X(c_plgchr) X(c_plgspa)

#define POSENC_CAIRO_FUNCTIONS(X)                                                             \
  X(cairo_image_surface_create) X(cairo_svg_surface_create_for_stream)                         \
  X(cairo_pdf_surface_create_for_stream) X(cairo_pdf_surface_set_metadata)                     \
  X(cairo_surface_status) X(cairo_status_to_string) X(cairo_create) X(cairo_set_source_rgb)    \
  X(cairo_paint) X(cairo_destroy) X(cairo_surface_flush) X(cairo_surface_write_to_png_stream)  \
  X(cairo_surface_finish) X(cairo_surface_destroy)

namespace posenc::plot_detail {

struct GraphicsApi {
#define POSENC_MEMBER(name) decltype(&::name) name = nullptr;
  POSENC_PLPLOT_FUNCTIONS(POSENC_MEMBER)
  POSENC_CAIRO_FUNCTIONS(POSENC_MEMBER)
#undef POSENC_MEMBER
};

/// The functions, loaded on the first call (thread-safe). Throws OutputError naming the
/// missing library or function and the Debian package that provides it.
const GraphicsApi& gfx();

}  // namespace posenc::plot_detail
